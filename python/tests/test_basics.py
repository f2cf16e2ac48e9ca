import errno

import pytest

import transferengine as te


def test_version_and_strerror():
    assert te.version().startswith("0.")
    assert "Invalid" in te.strerror(-errno.EINVAL)


def test_config_dict_ini_text_and_path(tmp_path):
    with te.Engine({"engine": {"plugin": "loopback", "nics_per_group": 2},
                    "loopback": {"devices": 2}}) as e:
        assert e.nic_count() == 2
    with te.Engine("[engine]\nplugin = loopback\n") as e:
        assert e.plugin == "loopback"
    ini = tmp_path / "te.ini"
    ini.write_text("[engine]\ngroups = 2\n")
    with te.Engine(ini) as e:
        assert e.groups == 2
    with te.Engine(engine_groups=2) as e:
        assert e.groups == 2
    cfg = te.Config({"engine.plugin": "loopback"}).set("engine", "groups", 3)
    assert cfg.get("engine", "groups") == "3"
    with te.Engine(cfg) as e:
        assert e.groups == 3


def test_bad_config_names_the_key():
    with pytest.raises(te.TEError) as ei:
        te.Engine({"engine": {"queue_dept": 3}})
    assert ei.value.errno == errno.EINVAL
    assert "queue_dept" in str(ei.value)
    with pytest.raises(ValueError):
        te.Config({"noseparator": 1})
    with pytest.raises(FileNotFoundError):
        te.Engine("/nonexistent/te.ini")
    with pytest.raises(TypeError):
        te.Engine(42)


def test_engine_info(engine):
    info = engine.nic_info()
    assert info.name == "lo0"
    kinds = [p.kind for p in engine.paths()]
    assert "write_imm" in kinds
    w = [p for p in engine.paths() if p.kind == "write"][0]
    assert "hardware" in w.missing and "zero_copy" in w.caps
    assert te.cap_names(te.lib.TE_CAP_NATIVE_RMA) == ["native_rma"]
    with pytest.raises(te.TEError):
        engine.nic_info(0, 5)


def test_require_policy_refuses_with_the_capability():
    with pytest.raises(te.TEError) as ei:
        te.Engine({"engine": {"require": "hardware"}})
    assert ei.value.errno == errno.ENOTSUP
    assert "lacks hardware" in str(ei.value)


def test_bad_address_bytes(engine):
    with pytest.raises(te.TEError) as ei:
        engine.add_peer(b"\x00" * 7)
    assert ei.value.message
    good = engine.address()
    with pytest.raises(te.TEError):
        engine.add_peer(good[: len(good) // 2])


def test_closed_engine_raises(engine):
    engine.close()
    assert engine.closed
    with pytest.raises(te.TEError):
        engine.address()
    engine.close()  # idempotent


def test_config_from_environment(tmp_path, monkeypatch):
    # TE_CONFIG names the file Engine() loads when given no configuration.
    ini = tmp_path / "env.ini"
    ini.write_text("[engine]\ngroups = 2\n")
    monkeypatch.setenv("TE_CONFIG", str(ini))
    with te.Engine() as e:
        assert e.groups == 2
    monkeypatch.delenv("TE_CONFIG")
    # TE_<SECTION>_<KEY> overrides any key, also one set from Python.
    monkeypatch.setenv("TE_ENGINE_GROUPS", "3")
    cfg = te.Config({"engine": {"groups": 1}})
    assert cfg.get("engine", "groups") == "3"
    with te.Engine(cfg) as e:
        assert e.groups == 3


def test_peer_alive_until_its_engine_closes():
    import time
    with te.Engine() as a:
        b = te.Engine()
        p = a.add_peer(b.address())
        assert a.peer_alive(p)
        with pytest.raises(te.TEError) as ei:
            a.peer_alive(p + 1000)
        assert ei.value.errno == errno.ENOENT
        b.close()
        deadline = time.monotonic() + 10
        while a.peer_alive(p) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not a.peer_alive(p), "a closed peer engine was never declared down"
