"""engine/products.py, more: a product autograd records keeps its gradient, the MTP head's drafts and verify pass
read through it, and the bench its docstring cites says what it measures. (A file of its own: tests/test_products.py
is being changed on main at the same time; FAST is the context under either of its names.)"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from engine import products
from qwen.generate import generate_ids
from qwen.model import load_model

FAST = getattr(products, "FastProducts", None) or getattr(products, "fast_products")


def test_a_product_autograd_records_keeps_its_gradient():
    """With gradients on (a learner's own code, not generation's inference_mode), a one-row product
    inside the products' context still has its backward: oneDNN's inner product has none (torch only warns,
    and the weight's gradient was missing), so such a call runs F.linear."""
    layer = nn.Linear(1024, 1024, bias=False)
    x = torch.randn(1, 1, 1024, generator=torch.Generator().manual_seed(4), requires_grad=True)
    with torch.enable_grad():
        F.linear(x, layer.weight).square().sum().backward()
        want_w, want_x = layer.weight.grad.clone(), x.grad.clone()
        layer.weight.grad = x.grad = None
        with FAST(layer):
            layer(x).square().sum().backward()
    assert layer.weight.grad is not None and torch.allclose(layer.weight.grad, want_w, atol=1e-5, rtol=1e-5)
    assert torch.allclose(x.grad, want_x, atol=1e-5, rtol=1e-5)


def test_the_bench_the_docstring_cites_says_it_measures_them():
    """The module docstring sends the reader to bench/bench_model.py's "1-row products" and "where one
    decode step goes": its --help names both (it named neither; --skip-kernels had no help at all)."""
    import re
    import subprocess
    import sys
    from pathlib import Path
    cited = products.__doc__.split("bench/bench_model.py measures each side by side")[1].split(").")[0]
    sections = re.findall(r'"([^"]+)"', cited)
    assert sections == ["1-row products", "where one decode step goes"]
    bench = Path(products.__file__).resolve().parents[1] / "bench" / "bench_model.py"
    done = subprocess.run([sys.executable, str(bench), "--help"], capture_output=True, text=True, timeout=60)
    text = " ".join(done.stdout.split())                                 # argparse wraps the help lines
    assert done.returncode == 0 and all(s in text for s in sections), text
    assert "--child" not in text                                        # the bench's own plumbing is not listed
