import errno

import pytest

import transferengine as te


def test_spaces_do_not_alias_and_retire(self_peer):
    e, peer = self_peer
    src = e.register(bytearray(64), access=0)
    dst = e.register(bytearray(64))
    kv, moe = e.imm_space("kv", 8), e.imm_space("moe", 8)
    assert kv[3] != moe[3]
    assert e.imm_lookup(moe[3]) == ("moe", 3, 0)
    assert e.imm_lookup(5) is None
    for raw, n in ((kv[3], 2), (moe[3], 3)):
        for _ in range(n):
            e.submit(te.write(peer, src, dst.descriptor(), 1, imm=raw)).result(10)
    e.imm_wait(kv[3], 2, 5000)
    e.imm_wait(moe[3], 3, 5000)
    old = kv[3]
    kv.retire()
    assert kv[3] != old
    with pytest.raises(te.TEError) as ei:
        e.expect(old, 1)
    assert ei.value.errno == errno.ESTALE and "'kv'" in str(ei.value)
    assert kv.stats().epoch == 1
    with pytest.raises(te.TEError) as ei:
        e.imm_space("clash", 4, base=kv.stats().base)
    assert ei.value.errno == errno.EINVAL or ei.value.errno == errno.EADDRINUSE
    with pytest.raises(te.TEError):
        kv.value(8)
    moe.destroy()
    with pytest.raises(te.TEError):
        moe[0]
