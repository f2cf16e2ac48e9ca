"""The library's log in Python's logging module (transferengine.log,
docs/logging.md): the core's and a plugin's messages, from the engine's
own threads, arrive as records of the logger "transferengine" with levels
mapped and the origin attached; route_to_logging(False) gives the stderr
lines back; TE_PY_LOGGING=0 never routes; set_level(-1) silences."""
import logging
import os
import subprocess
import sys

import numpy as np

import transferengine as te

LOGGER = "transferengine"


def records(caplog, origin=None):
    return [r for r in caplog.records if r.name == LOGGER and
            hasattr(r, "te_origin") and (origin is None or
                                         r.te_origin == origin)]


def test_routed_by_default_with_levels_mapped(caplog):
    assert te.log.routed()
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        te.log.log(te.log.ERROR, "e 100%")
        te.log.log(te.log.WARN, "w", origin="te-kv")
        te.log.log(te.log.INFO, "i")
        te.log.log(te.log.DEBUG, "d", origin="core")
    got = [(r.levelno, r.te_origin, r.getMessage()) for r in records(caplog)]
    assert got == [(logging.ERROR, "python", "python: e 100%"),
                   (logging.WARNING, "te-kv", "te-kv: w"),
                   (logging.INFO, "python", "python: i"),
                   (logging.DEBUG, "core", "d")]


def test_core_and_plugin_messages_from_engine_threads(caplog):
    """A write on a loopback that fails every operation: the plugin reports
    the failure (debug, origin "loopback") from the engine's worker thread,
    the core its software paths (info, origin "core") at creation."""
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        with te.Engine({"engine": {"log_level": "3"},
                        "loopback": {"fault_fail_every": "1"}}) as e:
            peer = e.add_peer(e.address())
            src = np.zeros(4096, dtype=np.uint8)
            dst = np.zeros(4096, dtype=np.uint8)
            smr, dmr = e.register(src), e.register(dst)
            try:
                c = e.submit(te.write(peer, smr, bytes(dmr.descriptor()),
                                      64)).result(10)
                assert c.status != 0
            except te.TEError:
                pass
    core = records(caplog, "core")
    assert core and all(r.levelno == logging.INFO for r in core), core
    plugin = [r for r in records(caplog, "loopback")
              if "fault_fail_every=1" in r.getMessage()]
    assert plugin, [r.getMessage() for r in records(caplog)]
    assert plugin[0].levelno == logging.DEBUG
    assert plugin[0].getMessage().startswith("loopback: loopback lo")


def test_logger_level_filters(caplog):
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        te.log.log(te.log.WARN, "not wanted")
        te.log.log(te.log.ERROR, "wanted")
    assert [r.getMessage() for r in records(caplog)] == ["python: wanted"]


def test_set_level_silences(caplog):
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        try:
            te.log.set_level(-1)
            te.log.log(te.log.ERROR, "silenced")
            te.log.set_level(te.log.WARN)
            te.log.log(te.log.INFO, "below the threshold")
            te.log.log(te.log.WARN, "kept")
        finally:
            te.log.set_level(te.log.DEBUG)
    assert [r.getMessage() for r in records(caplog)] == ["python: kept"]


def test_route_off_gives_stderr_back(caplog, capfd):
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        try:
            te.log.route_to_logging(False)
            assert not te.log.routed()
            te.log.log(te.log.WARN, "to stderr", origin="te-kv")
        finally:
            te.log.route_to_logging(True)
        te.log.log(te.log.WARN, "to logging")
    assert [r.getMessage() for r in records(caplog)] == ["python: to logging"]
    assert "transferengine warning: te-kv: to stderr\n" in capfd.readouterr().err


def test_env_keeps_stderr_and_exit_is_clean():
    """TE_PY_LOGGING=0: nothing routed. And with routing on, an engine
    still open at exit logs while closing, then the sink is removed: the
    interpreter exits cleanly."""
    code = ("import transferengine as te\n"
            "print(te.log.routed())\n"
            "te.log.log(te.log.WARN, 'plain')\n")
    env = dict(os.environ, TE_PY_LOGGING="0")
    p = subprocess.run([sys.executable, "-c", code], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"
    assert "transferengine warning: python: plain\n" in p.stderr
    code = ("import logging, transferengine as te\n"
            "logging.basicConfig(level=logging.INFO, format='%(te_origin)s|"
            "%(message)s')\n"
            "e = te.Engine({'engine': {'log_level': '2'}})\n"
            "e.add_peer(e.address())\n")
    env = dict(os.environ)
    env.pop("TE_PY_LOGGING", None)
    p = subprocess.run([sys.executable, "-c", code], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "core|NIC lo0" in p.stderr
    assert "transferengine info:" not in p.stderr
