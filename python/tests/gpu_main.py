"""ctest python_gpu (label gpu): the CUDA variants of the binding's tests
(pytest -k cuda: torch CUDA tensors through the library, test_cuda.py).
Exits 77 (skipped) where CUDA or torch's CUDA cannot be used, so that on a
GPU machine the gpu label cannot pass by skipping."""
import os
import sys

import pytest
import torch

from transferengine import cuda

ok, why = cuda.cuda_status()
if not ok or not torch.cuda.is_available():
    print(f"python_gpu: skipped: {why or 'torch sees no CUDA device'}")
    sys.exit(77)
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs", "-k", "cuda",
                      os.path.dirname(os.path.abspath(__file__))]))
