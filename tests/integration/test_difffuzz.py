"""
Differential fuzzing of transparency (tests/difffuzz/difffuzz.py): random
pipelines straight to one server and through ttlguard to another, with
replies, keyspaces and (with rules) TTLs compared, on every server the suite
runs against (TTLG_REDIS_SERVER).

  test_regression_case   every case in tests/difffuzz/cases/, in both
                         connection modes: each was a difference once
  test_fuzz              TTLG_DIFFFUZZ_SECONDS (default 30) of fresh cases per
                         connection mode per rules mode; TTLG_DIFFFUZZ_SEED
                         sets the seed (default "ci", printed). A
                         finding is shrunk and its case file written to the
                         test's temporary directory; the failure shows it.

The connection model (tests/difffuzz/model.py) follows Redis 7.0. Where a
server answers a batch with another number of replies than the model says
(Redis 7.2+, Valkey), the batch is compared raw: the proxy's replies against
the server's for the same batch (difffuzz.compare_raw), never skipped.
"""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "difffuzz"))

import difffuzz  # noqa: E402
import harness  # noqa: E402

SECONDS = float(os.environ.get("TTLG_DIFFFUZZ_SECONDS", "30"))
# A fixed seed keeps the suite reproducible; difffuzz.py explores new seeds.
SEED = os.environ.get("TTLG_DIFFFUZZ_SEED") or "ci"
SHRINK_SECONDS = 90


@pytest.fixture
def env_for(tmp_path):
    """Factory: a difffuzz environment (two servers, ttlguard) for a mode;
    ttlguard must exit 0 on SIGTERM at teardown."""
    started = []

    def make(mode):
        if not os.path.exists(harness.TTLG_BIN):
            if harness.TTLG_BIN_EXPLICIT:
                pytest.fail("ttlguard binary %s does not exist" % harness.TTLG_BIN)
            pytest.skip("ttlguard binary %s does not exist" % harness.TTLG_BIN)
        started.append(difffuzz.Env(tmp_path, mode))
        return started[-1]

    yield make
    codes = [(e.mode, e.close()) for e in started]
    assert all(rc == 0 for _, rc in codes), "ttlguard exit status on SIGTERM: %r" % codes


def _case_params():
    return [pytest.param(path, mode, id="%s-%s" % (os.path.basename(path)[:-5], mode))
            for path in difffuzz.case_files() for mode in difffuzz.replay_modes(path)]


@pytest.mark.parametrize("path,mode", _case_params())
def test_regression_case(env_for, path, mode):
    problem = difffuzz.replay(env_for(mode), path)
    with open(path) as f:
        title = json.load(f).get("title", "")
    assert problem is None, "%s (%s): %s" % (os.path.basename(path), title, problem)


def _fuzz_modes():
    """All four modes; only those of its connection mode when the suite runs
    with TTLG_PROXY_CONF=multiplex=... (tests/run.sh's 1:1 pass)."""
    forced = harness.EXTRA_CONF.get("multiplex", "").strip()
    prefix = {"on": "mux-", "off": "1to1-"}.get(forced, "")
    return [m for m in difffuzz.MODES if m.startswith(prefix)]


@pytest.mark.timeout(SECONDS + 2 * SHRINK_SECONDS + 120)
@pytest.mark.parametrize("mode", _fuzz_modes())
def test_fuzz(env_for, tmp_path, capsys, mode):
    found = str(tmp_path / "cases")
    st = difffuzz.campaign(env_for(mode), SEED, SECONDS, found, SHRINK_SECONDS,
                           log=lambda line: None)
    with capsys.disabled():
        sys.stdout.write("\ndifffuzz seed %s %s\n" % (SEED, st.line()))
    report = ["%s\n  case: %s%s\n%s" % (f, path, " (flaky)" if flaky else "",
                                        open(path).read()) for f, path, flaky in st.findings]
    assert not st.findings, "seed %s: %d findings\n%s" % (SEED, len(st.findings),
                                                         "\n".join(report))
    assert st.cases > 0 and st.commands > 0, st.line()
    assert not st.invalid, \
        "seed %s: the direct server died under these cases:\n%s" % (SEED, "\n".join(st.invalid[:10]))
