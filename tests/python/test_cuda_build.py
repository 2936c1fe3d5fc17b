"""What public training code asks of torch.cuda, on the virtual device, under every PyTorch of the matrix
(issue 25). On a CUDA build without a GPU (what `pip install torch` gives a laptop or a CI runner), nothing
the device does may reach the real CUDA runtime: each call below once crashed such a job ("API call is not
supported in the installed CUDA driver") or printed CUDA's initialisation warnings. The same code must run,
silently, on a CPU build."""
import os
import subprocess
import sys
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(HERE, "..", "..", "python")

PRELUDE = """
import sys, warnings
sys.path.insert(0, %r)
warnings.simplefilter("always")
import torch
from oomharness.virtual_device import install_with_budget
dev = install_with_budget(1 << 30)
""" % PY

# What stderr must never hold: CUDA's own voice (a warning, an error, the driver) from inside a job.
CUDA_NOISE = ("CUDA initialization", "cudaGetDeviceCount", "installed CUDA driver", "Found no NVIDIA driver",
              "CUDA error", "cuda runtime", "CUDA driver")


def run(body):
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True, text=True,
                          timeout=240, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    return proc


class PublicCudaCode(unittest.TestCase):
    def check(self, body, expect_out):
        proc = run(body)
        self.assertEqual(proc.returncode, 0, "the program failed:\n" + proc.stdout + proc.stderr)
        for noise in CUDA_NOISE:
            self.assertNotIn(noise.lower(), proc.stderr.lower(), "stderr:\n" + proc.stderr)
        self.assertEqual(proc.stdout.split(), expect_out.split(), proc.stdout + proc.stderr)

    def test_checkpoint_loaded_to_cuda_every_way_users_write_it(self):
        self.check("""
            import io, os, tempfile
            model = torch.nn.Linear(8, 4).cuda()
            opt = torch.optim.AdamW(model.parameters())
            model(torch.randn(2, 8, device="cuda")).sum().backward(); opt.step()
            path = os.path.join(tempfile.mkdtemp(), "ck.pt")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": 3}, path)
            for where in ("cuda", "cuda:0", torch.device("cuda"), torch.device("cuda", 0), {"cuda:0": "cuda:0"},
                          lambda storage, loc: storage.cuda()):
                state = torch.load(path, map_location=where, weights_only=True)
                w = state["model"]["weight"]
                print(dev.on_device(w), torch.equal(w.cpu(), model.weight.cpu()), state["step"])
            state = torch.load(path)
            buf = io.BytesIO(); torch.save(model.state_dict(), buf); buf.seek(0)
            print(dev.on_device(torch.load(buf, map_location="cuda")["bias"]))
            cpu_state = torch.load(path, map_location="cpu")
            print(dev.on_device(cpu_state["model"]["weight"]))
            # A function that moves only some storages: what it moved goes on the device, whichever came last.
            first = []
            def some(storage, loc):
                if not first:
                    first.append(loc)
                    return storage.cuda()
                return storage
            print(any(dev.on_device(t) for t in torch.load(path, map_location=some)["model"].values()))
            model.load_state_dict(torch.load(path, map_location="cuda")["model"]); opt.load_state_dict(state["opt"])
            print("loaded")
        """, "True True 3 " * 6 + "True False True loaded")

    def test_events_streams_synchronize_and_device_guards(self):
        self.check("""
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            x = torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")
            end.record(); end.synchronize(); torch.cuda.synchronize()
            print(start.elapsed_time(end) >= 0, end.query())
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                y = x * 2
            torch.cuda.current_stream().wait_stream(s); s.synchronize()
            with torch.cuda.device(0):
                z = torch.ones(3, device="cuda")
            torch.cuda.set_device(0)
            print(dev.on_device(y), dev.on_device(z), torch.cuda.current_device(), torch.cuda.get_device_name(0) != "")
            torch.cuda.nvtx.range_push("step"); torch.cuda.nvtx.range_pop()
            y.record_stream(s)
            print(isinstance(torch.cuda.current_stream(), torch.cuda.Stream))
        """, "True True True True 0 True True")

    def test_amp_grad_scaler_both_spellings_and_pinned_batches(self):
        self.check("""
            model = torch.nn.Linear(16, 4).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for scaler in (torch.amp.GradScaler("cuda"), torch.cuda.amp.GradScaler()):
                with torch.autocast("cuda"):
                    loss = model(torch.randn(8, 16, device="cuda")).float().pow(2).mean()
                scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); opt.zero_grad()
                print(dev.on_device(loss))
            data = torch.utils.data.TensorDataset(torch.randn(32, 16), torch.randint(0, 4, (32,)))
            for xb, yb in torch.utils.data.DataLoader(data, batch_size=16, pin_memory=True):
                xb = xb.cuda(non_blocking=True)
                print(dev.on_device(xb), xb.shape[0])
            t = torch.randn(4).pin_memory()
            print(dev.on_device(t.to("cuda", non_blocking=True)))
        """, "True True True 16 True 16 True")


if __name__ == "__main__":
    unittest.main()
