"""A torch reference of libte-weights' fp8 quantisation, written from the
format's definition (not from the C encoder), so the demo and tests can
check the library's bytes against an independent computation. Torch 1.13
(Debian's) has no float8 dtype: codes are uint8 and the rounding is done
by searching the 127 non-negative finite E4M3 values.

Rule (docs/weights.md): per 128x128 block of a rows x cols bf16 matrix,
scale = amax / 448 (float32; 1 for an all-zero block), code = the E4M3
value nearest to x / scale, ties to the even code, |x / scale| >= 448
saturating to 448. The library's layout of a quantised slice: the codes
(rows*cols bytes, padded to a multiple of 4), then the float32 scales
row-major by block.
"""
import torch

BLOCK = 128
E4M3_MAX = 448.0


def _e4m3_values():
    """Value of every code 0..126 (positive, finite), float64, ascending."""
    vals = []
    for c in range(127):
        e, m = c >> 3, c & 7
        vals.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return torch.tensor(vals, dtype=torch.float64)


_VALUES = _e4m3_values()


def e4m3_encode(y: torch.Tensor) -> torch.Tensor:
    """float32 tensor -> uint8 E4M3 codes (nearest, ties to even, saturating)."""
    a = y.abs().to(torch.float64)
    hi = torch.searchsorted(_VALUES, a).clamp(max=126)
    lo = (hi - 1).clamp(min=0)
    d_lo, d_hi = a - _VALUES[lo], _VALUES[hi] - a
    pick = torch.where(d_lo < d_hi, lo, hi)
    pick = torch.where((d_lo == d_hi) & (lo % 2 == 0), lo, pick)
    pick = torch.where(a >= E4M3_MAX, torch.full_like(pick, 126), pick)
    return (pick | (torch.signbit(y).to(torch.int64) << 7)).to(torch.uint8)


def e4m3_decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 E4M3 codes (no NaN) -> float32 values."""
    c = codes.to(torch.int64)
    v = _VALUES.to(torch.float32)[c & 0x7f]
    return torch.where(c >= 0x80, -v, v)


def _blocks(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def _expand(scales: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    return scales.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:rows, :cols]


def quantise(w: torch.Tensor):
    """bf16 rows x cols -> (codes uint8 rows x cols, scales float32 blocks)."""
    x = w.to(torch.float32)
    rows, cols = x.shape
    br, bc = _blocks(rows), _blocks(cols)
    padded = torch.zeros(br * BLOCK, bc * BLOCK, dtype=torch.float32)
    padded[:rows, :cols] = x.abs()
    amax = padded.reshape(br, BLOCK, bc, BLOCK).amax(dim=(1, 3))
    ok = (amax > 0) & torch.isfinite(amax)
    scales = torch.where(ok, amax / torch.tensor(E4M3_MAX, dtype=torch.float32),
                         torch.ones_like(amax))
    return e4m3_encode(x / _expand(scales, rows, cols)), scales


def dequantise(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """What an fp8 weight means: code value times its block's scale (float32)."""
    rows, cols = codes.shape
    return e4m3_decode(codes) * _expand(scales, rows, cols)


def slice_views(buf: torch.Tensor, rows: int, cols: int):
    """(codes, scales) views into a received fp8 slice (a uint8 tensor of
    the slice's bytes): no copy, the engine's own memory."""
    n = rows * cols
    pad = (n + 3) & ~3
    ns = _blocks(rows) * _blocks(cols)
    codes = buf[:n].view(rows, cols)
    scales = buf[pad:pad + 4 * ns].view(torch.float32).view(_blocks(rows), _blocks(cols))
    return codes, scales
