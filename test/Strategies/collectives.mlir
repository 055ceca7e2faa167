// REQUIRES: whole-suite
// The canonical forward collectives of each partitioning strategy (docs/tactics.md, "Composing
// strategies"), pinned exactly: every collective, in order, and their count (the `total` line). The strategies and their
// tactics are those of examples/strategies/strategies.py; test/mpi/test_strategies.py runs them on MPI ranks.

// RUN: slicer-opt %S/../../examples/mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=MLP-DATA
// MLP-DATA: total: 0 collectives

// RUN: slicer-opt %S/../../examples/mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg1.1=y;arg2.0=y;arg3.0=y},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=MLP-MEGATRON
// MLP-MEGATRON: 1. shard.all_reduce over [y] 8x16 -> 8x16 -> {{\[\[}}],[]]: 512 B received per device
// MLP-MEGATRON: total: 1 collectives

// RUN: slicer-opt %S/../../examples/mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x;arg1.1=y;arg2.0=y;arg3.0=y},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=MLP-DATA-MEGATRON
// MLP-DATA-MEGATRON: 1. shard.all_reduce over [y] 4x16 -> 4x16 -> {{\[\[}}x],[]]: 256 B received per device
// MLP-DATA-MEGATRON: total: 1 collectives

// RUN: slicer-opt %S/../../examples/mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg1.1=y;arg2.0=y;arg3.0=y;arg0.0=y;result0.0=y},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=MLP-MEGATRON-SEQUENCE
// MLP-MEGATRON-SEQUENCE: 1. shard.all_gather over [y] 4x16 -> 8x16 -> {{\[\[}}],[]]: 256 B received per device
// MLP-MEGATRON-SEQUENCE: 2. shard.reduce_scatter over [y] 8x16 -> 4x16 -> {{\[\[}}y],[]]: 256 B received per device
// MLP-MEGATRON-SEQUENCE: total: 2 collectives

// RUN: slicer-opt %S/../../examples/mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=MLP-FSDP
// MLP-FSDP: 1. shard.all_gather over [x] 8x32 -> 16x32 -> {{\[\[}}],[]]: 1024 B received per device
// MLP-FSDP: 2. shard.all_gather over [x] 16 -> 32 -> {{\[\[}}]]: 64 B received per device
// MLP-FSDP: 3. shard.all_gather over [x] 16x16 -> 32x16 -> {{\[\[}}],[]]: 1024 B received per device
// MLP-FSDP: total: 3 collectives

// RUN: slicer-opt %S/../../examples/mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x;arg1.1=y;arg2.0=y;arg3.0=y;arg1.0=x;arg3.1=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=MLP-DATA-MEGATRON-FSDP
// MLP-DATA-MEGATRON-FSDP: 1. shard.all_gather over [x] 8x16 -> 16x16 -> {{\[\[}}],[y]]: 512 B received per device
// MLP-DATA-MEGATRON-FSDP: 2. shard.all_gather over [x] 16x8 -> 16x16 -> {{\[\[}}y],[]]: 512 B received per device
// MLP-DATA-MEGATRON-FSDP: 3. shard.all_reduce over [y] 4x16 -> 4x16 -> {{\[\[}}x],[]]: 256 B received per device
// MLP-DATA-MEGATRON-FSDP: total: 3 collectives

// RUN: slicer-opt %S/../../examples/strategies/gelu_mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=GELU-MLP-DATA
// GELU-MLP-DATA: total: 0 collectives

// RUN: slicer-opt %S/../../examples/strategies/gelu_mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg1.1=y;arg2.0=y;arg3.0=y},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=GELU-MLP-MEGATRON
// GELU-MLP-MEGATRON: 1. shard.all_reduce over [y] 8x16 -> 8x16 -> {{\[\[}}],[]]: 512 B received per device
// GELU-MLP-MEGATRON: total: 1 collectives

// RUN: slicer-opt %S/../../examples/strategies/gelu_mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x;arg1.1=y;arg2.0=y;arg3.0=y},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=GELU-MLP-DATA-MEGATRON
// GELU-MLP-DATA-MEGATRON: 1. shard.all_reduce over [y] 4x16 -> 4x16 -> {{\[\[}}x],[]]: 256 B received per device
// GELU-MLP-DATA-MEGATRON: total: 1 collectives

// RUN: slicer-opt %S/../../examples/strategies/gelu_mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg1.1=y;arg2.0=y;arg3.0=y;arg0.0=y;result0.0=y},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=GELU-MLP-MEGATRON-SEQUENCE
// GELU-MLP-MEGATRON-SEQUENCE: 1. shard.all_gather over [y] 4x16 -> 8x16 -> {{\[\[}}],[]]: 256 B received per device
// GELU-MLP-MEGATRON-SEQUENCE: 2. shard.reduce_scatter over [y] 8x16 -> 4x16 -> {{\[\[}}y],[]]: 256 B received per device
// GELU-MLP-MEGATRON-SEQUENCE: total: 2 collectives

// RUN: slicer-opt %S/../../examples/strategies/gelu_mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=GELU-MLP-FSDP
// GELU-MLP-FSDP: 1. shard.all_gather over [x] 8x32 -> 16x32 -> {{\[\[}}],[]]: 1024 B received per device
// GELU-MLP-FSDP: 2. shard.all_gather over [x] 16 -> 32 -> {{\[\[}}]]: 64 B received per device
// GELU-MLP-FSDP: 3. shard.all_gather over [x] 16x16 -> 32x16 -> {{\[\[}}],[]]: 1024 B received per device
// GELU-MLP-FSDP: total: 3 collectives

// RUN: slicer-opt %S/../../examples/strategies/gelu_mlp.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x;arg1.1=y;arg2.0=y;arg3.0=y;arg1.0=x;arg3.1=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=GELU-MLP-DATA-MEGATRON-FSDP
// GELU-MLP-DATA-MEGATRON-FSDP: 1. shard.all_gather over [x] 8x16 -> 16x16 -> {{\[\[}}],[y]]: 512 B received per device
// GELU-MLP-DATA-MEGATRON-FSDP: 2. shard.all_gather over [x] 16x8 -> 16x16 -> {{\[\[}}y],[]]: 512 B received per device
// GELU-MLP-DATA-MEGATRON-FSDP: 3. shard.all_reduce over [y] 4x16 -> 4x16 -> {{\[\[}}x],[]]: 256 B received per device
// GELU-MLP-DATA-MEGATRON-FSDP: total: 3 collectives

// RUN: slicer-opt %S/../../examples/strategies/attention.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=ATTENTION-DATA
// ATTENTION-DATA: total: 0 collectives

// RUN: slicer-opt %S/../../examples/strategies/attention.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=ATTENTION-MEGATRON
// ATTENTION-MEGATRON: 1. shard.all_reduce over [y] 4x8x16 -> 4x8x16 -> {{\[\[}}],[],[]]: 2048 B received per device
// ATTENTION-MEGATRON: total: 1 collectives

// RUN: slicer-opt %S/../../examples/strategies/attention.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x;arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=ATTENTION-DATA-MEGATRON
// ATTENTION-DATA-MEGATRON: 1. shard.all_reduce over [y] 2x8x16 -> 2x8x16 -> {{\[\[}}x],[],[]]: 1024 B received per device
// ATTENTION-DATA-MEGATRON: total: 1 collectives

// RUN: slicer-opt %S/../../examples/strategies/attention.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x;arg4.0=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=ATTENTION-FSDP
// ATTENTION-FSDP: 1. shard.all_gather over [x] 8x4x4 -> 16x4x4 -> {{\[\[}}],[],[]]: 512 B received per device
// ATTENTION-FSDP: 2. shard.all_gather over [x] 8x4x4 -> 16x4x4 -> {{\[\[}}],[],[]]: 512 B received per device
// ATTENTION-FSDP: 3. shard.all_gather over [x] 8x4x4 -> 16x4x4 -> {{\[\[}}],[],[]]: 512 B received per device
// ATTENTION-FSDP: 4. shard.all_gather over [x] 2x4x16 -> 4x4x16 -> {{\[\[}}],[],[]]: 512 B received per device
// ATTENTION-FSDP: total: 4 collectives

// RUN: slicer-opt %S/../../examples/strategies/transformer_block.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=TRANSFORMER-BLOCK-DATA
// TRANSFORMER-BLOCK-DATA: total: 0 collectives

// RUN: slicer-opt %S/../../examples/strategies/transformer_block.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg3.1=y;arg4.1=y;arg5.1=y;arg6.0=y;arg9.1=y;arg10.0=y;arg11.0=y},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=TRANSFORMER-BLOCK-MEGATRON
// TRANSFORMER-BLOCK-MEGATRON: 1. shard.all_reduce over [y] 4x8x16 -> 4x8x16 -> {{\[\[}}],[],[]]: 2048 B received per device
// TRANSFORMER-BLOCK-MEGATRON: 2. shard.all_reduce over [y] 4x8x16 -> 4x8x16 -> {{\[\[}}],[],[]]: 2048 B received per device
// TRANSFORMER-BLOCK-MEGATRON: total: 2 collectives

// RUN: slicer-opt %S/../../examples/strategies/transformer_block.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x;arg3.1=y;arg4.1=y;arg5.1=y;arg6.0=y;arg9.1=y;arg10.0=y;arg11.0=y},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=TRANSFORMER-BLOCK-DATA-MEGATRON
// TRANSFORMER-BLOCK-DATA-MEGATRON: 1. shard.all_reduce over [y] 2x8x16 -> 2x8x16 -> {{\[\[}}],[],[]]: 1024 B received per device
// TRANSFORMER-BLOCK-DATA-MEGATRON: 2. shard.all_reduce over [y] 2x8x16 -> 2x8x16 -> {{\[\[}}],[],[]]: 1024 B received per device
// TRANSFORMER-BLOCK-DATA-MEGATRON: total: 2 collectives

// RUN: slicer-opt %S/../../examples/strategies/transformer_block.mlir --print-collectives -p 'slicer-apply-tactics{mesh=x=2,y=2 tactics=arg0.0=x;arg1.0=x;arg2.0=x;arg3.0=x;arg4.0=x;arg5.0=x;arg6.0=x;arg7.0=x;arg8.0=x;arg9.0=x;arg10.0=x;arg11.0=x},slicer-propagate,slicer-partition' 2>&1 >/dev/null | FileCheck %s --check-prefix=TRANSFORMER-BLOCK-FSDP
// TRANSFORMER-BLOCK-FSDP: 1. shard.all_gather over [x] 8 -> 16 -> {{\[\[}}]]: 32 B received per device
// TRANSFORMER-BLOCK-FSDP: 2. shard.all_gather over [x] 8 -> 16 -> {{\[\[}}]]: 32 B received per device
// TRANSFORMER-BLOCK-FSDP: 3. shard.all_gather over [x] 8x4x4 -> 16x4x4 -> {{\[\[}}],[],[]]: 512 B received per device
// TRANSFORMER-BLOCK-FSDP: 4. shard.all_gather over [x] 8x4x4 -> 16x4x4 -> {{\[\[}}],[],[]]: 512 B received per device
// TRANSFORMER-BLOCK-FSDP: 5. shard.all_gather over [x] 8x4x4 -> 16x4x4 -> {{\[\[}}],[],[]]: 512 B received per device
// TRANSFORMER-BLOCK-FSDP: 6. shard.all_gather over [x] 2x4x16 -> 4x4x16 -> {{\[\[}}],[],[]]: 512 B received per device
// TRANSFORMER-BLOCK-FSDP: 7. shard.all_gather over [x] 8 -> 16 -> {{\[\[}}]]: 32 B received per device
// TRANSFORMER-BLOCK-FSDP: 8. shard.all_gather over [x] 8 -> 16 -> {{\[\[}}]]: 32 B received per device
// TRANSFORMER-BLOCK-FSDP: 9. shard.all_gather over [x] 8x32 -> 16x32 -> {{\[\[}}],[]]: 1024 B received per device
// TRANSFORMER-BLOCK-FSDP: 10. shard.all_gather over [x] 16 -> 32 -> {{\[\[}}]]: 64 B received per device
// TRANSFORMER-BLOCK-FSDP: 11. shard.all_gather over [x] 16x16 -> 32x16 -> {{\[\[}}],[]]: 1024 B received per device
// TRANSFORMER-BLOCK-FSDP: total: 11 collectives
