"""The rank schedule: collectives start as soon as their input exists, at most one kernel ahead of their place,
and are waited for where their output is first needed; every schedule is a valid execution of the graph; timings
per step from a timeline."""

import numpy as np
import pytest

from slicer.core.mesh import Mesh
from slicer.lowering import CollectiveNode, KernelGraph, KernelNode
from slicer.runtime.execution.executor import schedule
from slicer.runtime.execution.timings import Event, Timings, node_timings, reduce_runs


def graph(args, nodes, results):
    built = []
    for n in nodes:
        if n[0] == "k":
            built.append(KernelNode(n[1], tuple(n[2]), tuple(n[3]), False))
        else:
            built.append(CollectiveNode("all_gather", None, n[1], n[2]))
    return KernelGraph("f", Mesh(x=2), {}, tuple(args), tuple(results), (), (), built, "")


def names(g, actions):
    out = []
    for a in actions:
        node = g.nodes[a.node]
        out.append(f"{a.kind} {node.name if isinstance(node, KernelNode) else node.output}")
    return out


def test_sequence_parallel_attention_gathers_v_while_scores_are_computed():
    # kernel_0 -> q, k, v; gather k; scores(q, k); gather v; out(scores, v)
    g = graph(["x"], [("k", "qkv", ["x"], ["k", "v", "q"]), ("c", "k", "K"), ("k", "scores", ["q", "K"], ["s"]),
                      ("c", "v", "V"), ("k", "out", ["s", "V"], ["o"])], ["o"])
    assert names(g, schedule(g)) == ["kernel qkv", "start K", "start V", "wait K", "kernel scores", "wait V",
                                     "kernel out"]
    assert names(g, schedule(g, overlap=False)) == ["kernel qkv", "start K", "wait K", "kernel scores", "start V",
                                                    "wait V", "kernel out"]


def test_collective_of_an_argument_starts_first_and_overlaps_independent_kernels():
    g = graph(["a", "b"], [("k", "k0", ["b"], ["z"]), ("c", "a", "A"), ("k", "k1", ["A", "z"], ["o"])], ["o"])
    assert names(g, schedule(g)) == ["start A", "kernel k0", "wait A", "kernel k1"]


def test_a_collective_starts_at_most_one_kernel_ahead_of_its_place():
    # FSDP: each layer's weight gathered just before the kernel using it; the gather of the last layer's weight
    # overlaps the kernel before it, it is not started (and its block held) from the beginning
    g = graph(["w0", "w1", "w2", "x"], [("c", "w0", "W0"), ("k", "l0", ["x", "W0"], ["h0"]), ("c", "w1", "W1"),
                                        ("k", "l1", ["h0", "W1"], ["h1"]), ("c", "w2", "W2"),
                                        ("k", "l2", ["h1", "W2"], ["h2"])], ["h2"])
    assert names(g, schedule(g)) == ["start W0", "start W1", "wait W0", "kernel l0", "start W2", "wait W1",
                                     "kernel l1", "wait W2", "kernel l2"]


def test_chained_collectives_wait_for_their_producer_where_the_chain_stands():
    g = graph(["a", "b"],
              [("c", "a", "A"), ("c", "A", "AA"), ("k", "k0", ["b"], ["z"]), ("k", "k1", ["AA", "z"], ["o"])], ["o"])
    assert names(g, schedule(g)) == ["start A", "wait A", "start AA", "kernel k0", "wait AA", "kernel k1"]


def test_result_collectives_are_waited_for_at_the_end():
    g = graph(["a"], [("k", "k0", ["a"], ["r", "s"]), ("c", "r", "R"), ("k", "k1", ["s"], ["t"])], ["R", "t"])
    assert names(g, schedule(g)) == ["kernel k0", "start R", "kernel k1", "wait R"]


def random_graph(rng, size):
    values = ["a0", "a1"]
    nodes = []
    for i in range(size):
        if rng.random() < 0.5:
            inputs = sorted(set(rng.choice(values, size=int(rng.integers(1, 3)))))
            outs = [f"k{i}.{j}" for j in range(int(rng.integers(1, 3)))]
            nodes.append(("k", f"k{i}", inputs, outs))
            values += outs
        else:
            nodes.append(("c", str(rng.choice(values)), f"c{i}"))
            values.append(f"c{i}")
    return graph(["a0", "a1"], nodes, [values[-1]])


@pytest.mark.parametrize("seed", range(30))
def test_every_schedule_is_a_valid_execution(seed):
    rng = np.random.default_rng(seed)
    g = random_graph(rng, int(rng.integers(1, 12)))
    for overlap in (True, False):
        actions = schedule(g, overlap)
        ready, started, waited = set(g.args), [], []
        for a in actions:
            node = g.nodes[a.node]
            if a.kind == "kernel":
                assert set(node.inputs) <= ready
                ready.update(node.outputs)
            elif a.kind == "start":
                assert node.input in ready and a.node not in started
                started.append(a.node)
            else:
                assert a.node in started and a.node not in waited
                waited.append(a.node)
                ready.add(node.output)
        collectives = [i for i, n in enumerate(g.nodes) if isinstance(n, CollectiveNode)]
        assert sorted(started) == sorted(waited) == collectives
        assert sum(a.kind == "kernel" for a in actions) == len(g.nodes) - len(collectives)
        # every rank computes the same schedule: collectives start in a deterministic order
        assert actions == schedule(g, overlap)


def test_step_timings_split_a_collective_into_its_parts_and_overlap():
    events = [Event(0, "k", "kernel", 0.0, 1.0), Event(1, "c", "start", 1.0, 1.5, {"skew": 0.25, "pack": 0.25}),
              Event(2, "k2", "kernel", 1.5, 3.0), Event(1, "c", "wait", 3.0, 4.0, {"transfer": 0.75, "unpack": 0.25})]
    per = node_timings(events)
    assert per[1]["seconds"] == 1.5 and per[1]["overlap"] == 1.5
    assert (per[1]["wait"], per[1]["pack"], per[1]["transfer"], per[1]["unpack"]) == (0.25, 0.25, 0.75, 0.25)
    seconds, steps = reduce_runs([[events], [events]], [[4.0], [4.5]])
    assert seconds == 4.5 and [s.kind for s in steps] == ["kernel", "collective", "kernel"]
    t = Timings(seconds, steps, 2, 1, events=(tuple(events), tuple(events)))
    again = Timings.from_json(t.to_json())
    assert again == t
    assert "overlapped 1500.000 ms" in t.text() and "transfer 750.000" in t.text()
