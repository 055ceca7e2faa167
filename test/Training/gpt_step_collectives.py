# REQUIRES: whole-suite
# RUN: %PYTHON %S/../../examples/training/collectives.py | FileCheck %s
# (the partitioner's collectives: the example compiles with buckets="off", collective_matmul="off")
# The canonical collectives of a training step, per transformer block: the GPT of examples/training/model.py
# (token and position embeddings, pre-norm blocks with separate q/k/v, gelu MLP, LM head, cross-entropy;
# AdamW), imported with slicer.training_step and partitioned with slicer.strategies. A block's collectives are
# what its second block adds (16 parameters per block). Pinned exactly: op, mesh axes and bytes per device.

# Data parallel: one all_reduce of each gradient over x, nothing else (no all_gather, nothing recomputed).
# CHECK-LABEL: strategy data on x=2
# CHECK-NEXT:  per block (16 all_reduce over [x]; 13120 B)
# CHECK-NEXT:    2 x all_reduce over [x] 4096 B
# CHECK-NEXT:    4 x all_reduce over [x] 1024 B
# CHECK-NEXT:    1 x all_reduce over [x] 256 B
# CHECK-NEXT:    9 x all_reduce over [x] 64 B
# CHECK:         optimizer state: 57860 B of 57860 B unpartitioned

# ZeRO-1/2: gradients reduce-scattered, the update on shards, updated parameters all-gathered.
# CHECK-LABEL: strategy zero1 on x=2
# CHECK-NEXT:  per block (16 all_gather over [x], 16 reduce_scatter over [x]; 13120 B)
# CHECK:         parameters: 28928 B of 28928 B unpartitioned
# CHECK:         optimizer state: 28932 B of 57860 B unpartitioned

# ZeRO-3 / FSDP: one all_gather per parameter (forward, kept for the backward), one reduce_scatter per
# gradient; parameters and optimizer state held 1/2 per device.
# CHECK-LABEL: strategy zero3 on x=2
# CHECK-NEXT:  per block (16 all_gather over [x], 16 reduce_scatter over [x]; 13120 B)
# CHECK:         parameters: 14464 B of 28928 B unpartitioned
# CHECK:         optimizer state: 28932 B of 57860 B unpartitioned

# Megatron: 2 all_reduces forward (after attention, after the MLP) and 2 backward (the input gradients of
# q/k/v together, and of fc1), nothing else.
# CHECK-LABEL: strategy megatron on y=2
# CHECK-NEXT:  per block (4 all_reduce over [y]; 8192 B)
# CHECK-NEXT:    4 x all_reduce over [y] 2048 B
# CHECK-NEXT:  rest (none; 0 B)

# Data + Megatron on 2x2: the same 4 over y, gradients over x only.
# CHECK-LABEL: strategy data+megatron on x=2,y=2
# CHECK-NEXT:  per block (16 all_reduce over [x], 4 all_reduce over [y]; 10848 B)
# CHECK:           4 x all_reduce over [y] 1024 B
# CHECK-NEXT:  rest (7 all_reduce over [x]; 2700 B)
