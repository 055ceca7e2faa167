"""The fuzzer lives in test/fuzz (package `fuzz`); its cases run in worker subprocesses.

Like `reliability/`, this folder tests the whole pipeline (tactics to the runtime), not one layer: the
two folders of test/unit that are not named after a layer of the package (test/unit/core/test_layout.py).
"""

import sys
from pathlib import Path

import pytest

TEST_DIR = Path(__file__).resolve().parents[2]
if str(TEST_DIR) not in sys.path:
    sys.path.insert(0, str(TEST_DIR))


@pytest.fixture(scope="session")
def fuzz_pool(cache_dir, tmp_path_factory):
    from fuzz.worker import Pool

    # The run's kernel cache (test/conftest.py): kernels the other tests built are hits here.
    with Pool(1, cache_dir=str(cache_dir), log_dir=str(tmp_path_factory.mktemp("fuzz-logs"))) as pool:
        yield pool
