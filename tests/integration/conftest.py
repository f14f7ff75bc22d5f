"""
Fixtures for the integration suite.

  redis_srv      a fresh redis-server on a free port (function scope)
  make_redis     factory: make_redis(extra_args) -> started RedisServer
  make_proxy     factory: make_proxy(redis_or_port, conf={...}) -> started
                 Ttlguard; at teardown it gets SIGTERM and must exit 0
  proxy          make_proxy(redis_srv)
  ep             parametrized over ("direct", "proxy"): the same test runs
                 against redis-server and through ttlguard
  pair           both endpoints at once, for byte-for-byte comparisons

When the ttlguard binary does not exist, proxy tests are skipped with a reason
(so the suite can be written against Redis first); when TTLG_BIN names it
explicitly, a missing binary fails them instead.

The server every fixture starts is harness.SERVER_BIN: redis-server from PATH
(Debian 12's Redis 7.0), or the binary TTLG_REDIS_SERVER names (another
redis-server or a valkey-server; tests/servers.sh prints the ones ttlguard is
tested against). Where a reply differs by server, a test asks
harness.server_identity(port) -> ("redis" | "valkey", version tuple).
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import harness  # noqa: E402
from harness import RedisServer, Ttlguard  # noqa: E402


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Remember each phase's outcome on the item so that fixtures can show the
    # proxy's stderr when the test itself failed.
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def make_redis(tmp_path):
    started = []

    def make(extra_args=(), **kw):
        r = RedisServer(tmp_path, extra_args, **kw).start()
        started.append(r)
        return r

    yield make
    for r in started:
        r.stop()


@pytest.fixture
def redis_srv(make_redis, request):
    """Extra redis-server arguments come from @pytest.mark.redis_args(...)."""
    m = request.node.get_closest_marker("redis_args")
    return make_redis(m.args if m else ())


@pytest.fixture
def make_proxy(tmp_path, request):
    started = []

    def make(backend, conf=None, expect=None, **kw):
        """backend: a RedisServer or a port number."""
        harness.need_binary()
        port = backend.port if isinstance(backend, RedisServer) else backend
        p = Ttlguard(tmp_path, port, conf, **kw)
        started.append(p)
        p.start(expect=expect)
        return p

    yield make

    problems = []
    for p in started:
        was_running = p.proc is not None
        rc = p.stop()
        failed = getattr(request.node, "rep_call", None)
        failed = failed is not None and failed.failed
        if failed or (was_running and rc != 0):
            sys.stderr.write("---- ttlguard %d stderr (exit %s) ----\n%s\n"
                             % (p.port, rc, p.stderr()))
        if was_running and rc != 0:
            problems.append("ttlguard on port %d: SIGTERM exit status %s (None = had to "
                            "SIGKILL)\n%s" % (p.port, rc, p.stderr()))
    assert not problems, "\n".join(problems)


def _marked_conf(request):
    m = request.node.get_closest_marker("proxy_conf")
    return dict(m.kwargs) if m else None


@pytest.fixture
def proxy(make_proxy, redis_srv, request):
    """Extra [proxy] keys come from @pytest.mark.proxy_conf(key=value)."""
    return make_proxy(redis_srv, _marked_conf(request))


class Endpoint:
    """Where a test sends its commands: redis-server itself or ttlguard."""

    def __init__(self, kind, redis, proxy=None):
        self.kind = kind
        self.redis = redis
        self.proxy = proxy
        self.port = proxy.port if proxy else redis.port

    def conn(self, **kw):
        return harness.Conn(self.port, **kw)

    def client(self, **kw):
        import redis
        kw.setdefault("socket_timeout", harness.slow(10))
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def __repr__(self):
        return "<%s :%d>" % (self.kind, self.port)


@pytest.fixture(params=["direct", "proxy"])
def ep(request, redis_srv):
    """One test, two targets: what passes direct must pass through ttlguard."""
    if request.param == "direct":
        return Endpoint("direct", redis_srv)
    make_proxy = request.getfixturevalue("make_proxy")
    return Endpoint("proxy", redis_srv, make_proxy(redis_srv, _marked_conf(request)))


@pytest.fixture
def pair(redis_srv, make_proxy, request):
    """(direct, proxy) on the same redis-server."""
    return (Endpoint("direct", redis_srv),
            Endpoint("proxy", redis_srv, make_proxy(redis_srv, _marked_conf(request))))
