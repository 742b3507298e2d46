from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session", autouse=True)
def fingerprint_cache(tmp_path_factory) -> Path:
    """Tests (and the commands they start) remember vocabulary fingerprints in their own directory,
    not the user's cache."""
    import os

    root = tmp_path_factory.mktemp("specdraft-cache")
    os.environ["SPECDRAFT_CACHE_DIR"] = str(root)
    return root


@pytest.fixture(autouse=True)
def no_copy_for_readers_running():
    """Each test starts with no copy for readers running in this process: a run's last copy may
    outlive it (snapshot.Copy), and a test that copies a fixture's warehouse (shutil.copytree)
    would otherwise meet a partial file that is renamed away under it."""
    from specdraft.warehouse import snapshot

    snapshot.Copy.wait_for_pending()
    yield
