"""The differential fuzzer in CI (issue 12): random programs, meshes and tactics, partitioned by slicer and
compared with an independent numpy evaluation. See docs/fuzzing.md.

- `test_differential`: SLICER_FUZZ_CASES hypothesis examples (default 200, about 25 s; 2,000 with SLICER_NIGHTLY=1;
  derandomized, so CI is reproducible; SLICER_FUZZ_SEED=<int> explores other cases). It fails on a wrong answer, an
  internal error or a hang; the shrunk case is written to test/fuzz/regressions/<hash>.json and the
  failure names that file.
- `test_regression`: replays every saved case and checks the class its file expects once fixed.
- `test_mpi_sample`: a few cases on MPI ranks (the simulator is not the only executor).

A quarter of the cases (SLICER_FUZZ_AOT_SHARE) also run the simulator with the kernels the MPI ranks load
(AOT-compiled by the vectorizing pipeline), which the JIT-based simulator does not exercise.
"""

import os

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from fuzz import regressions
from fuzz.cases import Case, generate_case
from fuzz.execute import FAILURES
from fuzz.shrink import shrink_structure
from fuzz.source import HypothesisSource, RandomSource

# The suite runs a sample (make test must stay short); SLICER_NIGHTLY=1 or SLICER_FUZZ_CASES explore more, and the
# standalone fuzzer (test/fuzz/run.py, docs/fuzzing.md) runs thousands before every release.
CASES = int(os.environ.get("SLICER_FUZZ_CASES", "2000" if os.environ.get("SLICER_NIGHTLY") == "1" else "200"))
AOT_SHARE = float(os.environ.get("SLICER_FUZZ_AOT_SHARE", "0.25"))  # cases also run with the ranks' AOT kernels
SEED = os.environ.get("SLICER_FUZZ_SEED")
TIMEOUT = float(os.environ.get("SLICER_FUZZ_TIMEOUT", "120"))
MPI_TIMEOUT = 240.0


class FuzzFailure(AssertionError):
    pass


def _request(case: Case, mpi: bool = False, aot: bool | None = None) -> dict:
    if aot is None:  # a fixed share of the cases, chosen by their content (reproducible)
        aot = int(case.key(), 16) % 1000 < AOT_SHARE * 1000
    return {"op": "case", "case": case.to_json(), "mpi": mpi, "aot": aot or mpi, "mpi_timeout": MPI_TIMEOUT - 20}


def _describe(case: Case, out: dict) -> str:
    return f"{out['signature']}\n{case.reproducer()}observed: {(out.get('message') or '')[:1500]}"


def _shrink_further(case: Case, out: dict, pool, mpi: bool = False, aot: bool = False,
                    budget: int = 100) -> tuple[Case, dict]:
    """Hypothesis shrinks the choices; this also removes dead code, tactics, results and ops directly."""
    found = {"out": out}

    def still_fails(c: Case) -> bool:
        o = pool.request(_request(c, mpi, aot), MPI_TIMEOUT if mpi else TIMEOUT)
        if o["signature"] == out["signature"]:
            found["out"] = o
            return True
        return False

    case, _ = shrink_structure(case, still_fails, budget=budget)
    return case, found["out"]


@pytest.mark.slow
def test_differential(fuzz_pool):
    last: dict = {}

    def check(data):
        case = generate_case(HypothesisSource(data), seed=0)
        req = _request(case)
        out = fuzz_pool.request(req, TIMEOUT)
        if out["kind"] in FAILURES or out["kind"] == "fuzzer-error":
            last["case"], last["out"], last["aot"] = case, out, req["aot"]
            raise FuzzFailure(out["signature"])

    decorate = settings(max_examples=CASES, deadline=None, derandomize=SEED is None, database=None,
                        report_multiple_bugs=False, print_blob=False,
                        suppress_health_check=list(HealthCheck))
    prop = given(st.data())(decorate(check))
    if SEED is not None:
        prop = seed(int(SEED))(prop)
    try:
        prop()
    except Exception:
        if "case" not in last:
            raise
    if "case" in last:
        case, out, aot = last["case"], last["out"], last["aot"]
        case, out = _shrink_further(case, out, fuzz_pool, aot=aot)
        path = regressions.save(case, out, aot=aot)
        pytest.fail(f"differential fuzzing found: {out['kind']} (shrunk case saved to {path}; "
                    f"replay: pytest {__file__}::test_regression):\n{_describe(case, out)}", pytrace=False)


@pytest.mark.parametrize("path", regressions.files(), ids=lambda p: p.stem)
def test_regression(path, fuzz_pool):
    case, data = regressions.load(path)
    mpi = data.get("mpi", False)
    out = fuzz_pool.request(_request(case, mpi, data.get("aot", mpi)), MPI_TIMEOUT if mpi else TIMEOUT)
    assert out["kind"] == data["expect"], (
        f"{path.name}: expected {data['expect']}, got {out['kind']}\n{_describe(case, out)}")


def _mpi_cases(count: int = 3) -> list[Case]:
    """The first cases (fixed seeds) with a valid schedule of 1-3 tactics on 2-4 devices."""
    found = []
    for s in range(10_000, 20_000):
        case = generate_case(RandomSource(s), seed=s, max_ops=5)
        if case.valid and case.tactics and 2 <= case.devices <= 4:
            found.append(case)
            if len(found) == count:
                break
    return found


@pytest.mark.mpi
@pytest.mark.parametrize("case", _mpi_cases(), ids=lambda c: c.key())
def test_mpi_sample(case, fuzz_pool):
    out = fuzz_pool.request(_request(case, mpi=True), MPI_TIMEOUT)
    if out["kind"] in FAILURES or out["kind"] == "fuzzer-error":
        case, out = _shrink_further(case, out, fuzz_pool, mpi=True, aot=True, budget=30)
        path = regressions.save(case, out, mpi=True)
        pytest.fail(f"MPI sample case failed (saved to {path}):\n{_describe(case, out)}", pytrace=False)
