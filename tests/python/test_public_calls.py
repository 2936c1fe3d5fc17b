"""What real public trainers ask of the virtual CUDA device (issue 41, "the virtual device runs what these
programs use"), each as the programs write it, under every PyTorch of the matrix: nn.DataParallel on one
device, tensors moved to where a parameter is, an optimizer's state loaded from a checkpoint, autocast to
float32, safetensors read to "cuda", NCCL asked for, and what the device cannot run said in one sentence
(Note [A call the virtual device cannot run] in python/oomharness/virtual_device/unsupported.py)."""
import os
import subprocess
import sys
import tempfile
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
MiB = 1 << 20
""" % PY


def run(body, name="job.py"):
    """Runs `body` as the file `name` (a user's program: its frames are the user's) in a fresh interpreter."""
    folder = tempfile.mkdtemp(prefix="oomh-public-calls-")
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(PRELUDE + textwrap.dedent(body))
    return subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=240, cwd=folder,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))


def has(module):
    import importlib.util
    return importlib.util.find_spec(module) is not None


# A 1024x1024 layer on the device trained one AdamW step and saved with a host tensor beside it (path); fresh()
# makes another layer and optimizer. Then the body of a test, at the same indentation.
SAVED_ADAMW_LAYER = """
            import gc, os, tempfile
            def fresh():
                lin = torch.nn.Linear(1024, 1024, bias=False).cuda()
                return lin, torch.optim.AdamW(lin.parameters())
            lin, opt = fresh()
            lin(torch.randn(2, 1024, device="cuda")).sum().backward(); opt.step()
            path = os.path.join(tempfile.mkdtemp(), "ck.pt")
            torch.save({"model": lin.state_dict(), "optimizer": opt.state_dict(), "host": torch.arange(3)}, path)
            del lin, opt; gc.collect()"""


class PublicCalls(unittest.TestCase):
    def check(self, body, expect_out):
        proc = run(body)
        self.assertEqual(proc.returncode, 0, "the program failed:\n" + proc.stdout + proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        self.assertEqual(proc.stdout.split(), expect_out.split(), proc.stdout + proc.stderr)
        return proc

    # Note [nn.DataParallel on the virtual device]: the ImageNet-style loop (the corpus's timm ResNet in
    # DataParallel died before step 1 with "module must have its parameters and buffers on device cuda:0").
    def test_data_parallel_on_one_device_trains_and_books_as_the_module_alone(self):
        self.check("""
            def loop(wrap):
                torch.manual_seed(0)
                net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                          torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10))
                model = torch.nn.DataParallel(net).cuda() if wrap else net.cuda()
                opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
                g = torch.Generator().manual_seed(1)
                losses = []
                for step in range(3):
                    images = torch.randn(16, 3, 16, 16, generator=g)  # host batches, as a DataLoader gives
                    target = torch.randint(0, 10, (16,), generator=g)
                    out = model(images)  # DataParallel copies the host batch to the device itself
                    loss = torch.nn.functional.cross_entropy(out, target.cuda(non_blocking=True))
                    opt.zero_grad(); loss.backward(); opt.step()
                    losses.append(round(loss.item(), 5))
                keys = sorted(model.state_dict())[:1]
                return losses, dev.on_device(out), torch.cuda.memory_allocated(), keys
            plain = loop(False)
            del_plain = torch.cuda.memory_allocated()
            wrapped = loop(True)
            print(plain[0] == wrapped[0], wrapped[1], wrapped[3])
            # The same tensors are held after each loop (the first loop's died with it): what the wrapper adds
            # on a GPU with one device is nothing.
            print(wrapped[2] - plain[2])
            # The functional form takes the same path.
            net = torch.nn.Linear(4, 2).cuda()
            y = torch.nn.parallel.data_parallel(net, torch.randn(3, 4))
            print(dev.on_device(y), tuple(y.shape))
        """, "True True ['module.0.bias'] 0 True (3, 2)")

    def test_data_parallel_over_two_devices_is_one_sentence_naming_the_line(self):
        proc = run("""
            model = torch.nn.DataParallel(torch.nn.Linear(4, 4).cuda(), device_ids=[0, 1])
            def train():
                return model(torch.randn(2, 4))
            train()
        """, name="train_dp.py")
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        lines = proc.stderr.strip().split("\n")
        self.assertEqual(len(lines), 1, "one sentence, no traceback:\n" + proc.stderr)
        self.assertIn("cannot run nn.DataParallel over 2 devices (device_ids=[0, 1])", lines[0])
        self.assertIn("called at train_dp.py:12 (`return model(torch.randn(2, 4))`), from train_dp.py:13", lines[0])

    # Issue 41: tensors moved to where a parameter is were host copies (`x.to(p.device)` with p.device "cpu").
    def test_tensors_say_cuda_and_what_is_moved_to_their_device_is_booked(self):
        self.check("""
            lin = torch.nn.Linear(256, 256, bias=False).cuda()
            p = next(lin.parameters())
            print(p.device, p.device.type, p.is_cuda, torch.randn(2).device)
            before = torch.cuda.memory_allocated()
            moved = [torch.randn(256, 256).to(p.device), torch.randn(256, 256).to(p),
                     torch.randn(256, 256).cuda(0), torch.randn(256, 256).to(device=torch.device(p.device)),
                     torch.zeros(256, 256, device=p.device), torch.randn(2).new_zeros(256, 256, device=p.device),
                     torch.empty_strided((256, 256), (256, 1), device=p.device)]
            print(all(dev.on_device(t) for t in moved), (torch.cuda.memory_allocated() - before) // (256 * 1024))
            host = [moved[0].to(torch.randn(1)), moved[0].new_zeros(4, device="cpu"), moved[0].cpu()]
            print(any(dev.on_device(t) for t in host), [str(t.device) for t in host])
            # A host tensor moved to a host tensor's device stays off the device.
            print(dev.on_device(torch.randn(3).to(torch.randn(1).device)))
        """, "cuda:0 cuda False cpu True 7 False ['cpu', 'cpu', 'cpu'] False")

    # Issue 41: an H100 holds 12 MiB for a 1024x1024 layer with AdamW after optimizer.load_state_dict of a
    # checkpoint loaded with map_location="cuda" (weights 4 + exp_avg 4 + exp_avg_sq 4); the device booked 4.
    # AdamW's step count (not capturable) stays where the checkpoint put it: a 512-byte block with "cuda".
    def test_optimizer_state_loaded_from_a_cuda_checkpoint_is_booked(self):
        self.check(SAVED_ADAMW_LAYER + """
            for where in ("cuda", "cpu"):
                lin, opt = fresh()
                base = torch.cuda.memory_allocated() - 4 * MiB  # all but the fresh layer's weights
                ck = torch.load(path, map_location=where)
                lin.load_state_dict(ck["model"]); opt.load_state_dict(ck["optimizer"])
                del ck; gc.collect()
                state = opt.state[lin.weight]
                print(where, torch.cuda.memory_allocated() - base - 12 * MiB, dev.on_device(state["exp_avg"]),
                      state["exp_avg"].device, dev.on_device(state["step"]))
                del lin, opt, state; gc.collect()
        """, "cuda 512 True cuda:0 True cpu 0 True cuda:0 False")

    # Note [Where torch.save says a tensor was] (loading.py): a checkpoint saved from the device says "cuda:0",
    # and torch.load with no map_location puts it back there, as on a GPU (12 MiB for the layer and AdamW's
    # moments); what was saved from the host stays on the host, AdamW's step count included (0 bytes more, where
    # map_location="cuda" above put it in a 512-byte block). Before, the file said "cpu": the loaded tensors
    # said cpu and held nothing on the device while the checkpoint was in hand (the first line).
    def test_a_checkpoint_loaded_with_no_map_location_goes_back_where_it_was(self):
        self.check(SAVED_ADAMW_LAYER + """
            lin, opt = fresh()
            base = torch.cuda.memory_allocated() - 4 * MiB
            ck = torch.load(path)
            print(ck["model"]["weight"].device, dev.on_device(ck["model"]["weight"]), ck["host"].device,
                  dev.on_device(ck["host"]))
            lin.load_state_dict(ck["model"]); opt.load_state_dict(ck["optimizer"])
            del ck; gc.collect()
            state = opt.state[lin.weight]
            print(torch.cuda.memory_allocated() - base - 12 * MiB, dev.on_device(state["exp_avg"]),
                  dev.on_device(state["step"]))
        """, "cuda:0 True cpu False 0 True False")

    # Note [A lazy parameter sent to the device] (tensors.py): `.cuda()` of a model with a LazyLinear failed
    # ("Attempted to use an uninitialized parameter in clone"); on a GPU its first forward makes the weight there.
    def test_a_lazy_module_sent_to_the_device_materializes_there(self):
        self.check("""
            m = torch.nn.Sequential(torch.nn.LazyLinear(256), torch.nn.ReLU(), torch.nn.Linear(256, 4)).cuda()
            before = torch.cuda.memory_allocated()
            y = m(torch.randn(8, 1024, device="cuda"))
            w = m[0].weight
            print(tuple(y.shape), tuple(w.shape), w.device, dev.on_device(w), torch.cuda.memory_allocated() - before >= MiB)
            host = torch.nn.LazyLinear(4)
            host(torch.randn(2, 3))
            print(host.weight.device, dev.on_device(host.weight))
        """, "(8, 4) (256, 1024) cuda:0 True True cpu False")

    def test_autocast_to_float32_keeps_float32(self):
        proc = self.check("""
            m = torch.nn.Linear(64, 64).cuda()
            x = torch.randn(8, 64, device="cuda")
            with torch.autocast("cuda", dtype=torch.float32):
                print(m(x).dtype)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = m(x)
                with torch.autocast("cuda", dtype=torch.float32):
                    print(h.dtype, m(h).dtype)
                print(m(x).dtype)
            print(m(x).dtype, torch.is_autocast_enabled("cpu"))
        """, "torch.float32 torch.bfloat16 torch.float32 torch.bfloat16 torch.float32 False")
        self.assertNotIn("Disabling autocast", proc.stderr, "the CPU's refusal of float32 must not show")

    @unittest.skipUnless(has("safetensors"), "safetensors is not in this Python")
    def test_safetensors_read_to_cuda_are_booked(self):
        self.check("""
            import os, tempfile
            from safetensors import safe_open
            from safetensors.torch import load_file, save_file
            path = os.path.join(tempfile.mkdtemp(), "adapter_model.safetensors")
            save_file({"w": torch.randn(512, 512), "b": torch.randn(512)}, path)
            before = torch.cuda.memory_allocated()
            state = load_file(path, device="cuda")
            print(sorted((k, dev.on_device(v), str(v.device)) for k, v in state.items()))
            print((torch.cuda.memory_allocated() - before) // 1024)
            with safe_open(path, framework="pt", device="cuda") as f:
                print(dev.on_device(f.get_tensor("w")), dev.on_device(f.get_slice("w")[:2]), sorted(f.keys()))
            with safe_open(path, framework="pt", device="cpu") as f:
                print(dev.on_device(f.get_tensor("w")))
            print(dev.on_device(load_file(path)["w"]))
        """, "[('b', True, 'cuda:0'), ('w', True, 'cuda:0')] 1026 True True ['b', 'w'] False False")

    # Note [NCCL on the virtual device].
    def test_nccl_runs_as_gloo_and_says_so(self):
        proc = self.check("""
            import os
            import torch.distributed as dist
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 20000))
            dist.init_process_group("nccl", rank=0, world_size=1)
            t = torch.ones(3, device="cuda")
            dist.all_reduce(t)
            ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda(), device_ids=[0])
            ddp(torch.randn(2, 4, device="cuda")).sum().backward()
            g = dist.new_group([0], backend="nccl")
            print(dist.get_backend(), t.tolist(), dev.on_device(t), sorted(dev.divergences))
            dist.destroy_process_group()
        """, "gloo [1.0, 1.0, 1.0] True ['nccl']")

    # Note [The CUDA generator's state] (runtime.py): torchtitan's FSDP2 died in DTensor's RNG tracker, which
    # reads the offset from bytes 8-16 of torch.cuda.get_rng_state() (the CPU generator's 5056 bytes before).
    def test_the_cuda_generator_state_has_a_gpus_shape_and_checkpointing_still_replays_dropout(self):
        self.check("""
            torch.manual_seed(7)
            s = torch.cuda.get_rng_state()
            print(s.dtype, s.numel(), torch.cuda.initial_seed(), s[8:].view(torch.int64).item())
            s[8:] = torch.tensor([4096], dtype=torch.int64).view(torch.uint8)
            torch.cuda.set_rng_state(s.cuda())
            print(torch.cuda.get_rng_state()[8:].view(torch.int64).item(), len(torch.cuda.get_rng_state_all()))
            torch.cuda.manual_seed(11)
            print(torch.cuda.initial_seed(), torch.cuda.get_rng_state()[8:].view(torch.int64).item())
            from torch.utils.checkpoint import checkpoint
            lin = torch.nn.Linear(32, 32).cuda()
            def block(x):
                return torch.nn.functional.dropout(lin(x), 0.5, training=True).sum()
            x = torch.randn(8, 32, device="cuda")
            torch.manual_seed(3); block(x).backward(); plain = lin.weight.grad.clone(); lin.weight.grad = None
            torch.manual_seed(3); checkpoint(block, x, use_reentrant=False).backward()
            print(torch.equal(plain, lin.weight.grad))
            try:
                torch.cuda.set_rng_state([1, 2])
            except TypeError as e:
                print("refused")
        """, "torch.uint8 16 7 0 4096 1 11 0 True refused")

    # Note [A call the virtual device cannot run]: a call that reached the missing CUDA runtime.
    def test_a_call_that_reaches_the_cuda_runtime_is_named_with_the_users_line(self):
        proc = run("""
            def make():
                return torch.Generator(device="cuda")
            g = make()
        """, name="train_gen.py")
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        lines = proc.stderr.strip().split("\n")
        self.assertEqual(len(lines), 1, "one sentence, no traceback:\n" + proc.stderr)
        self.assertIn("called at train_gen.py:11 (`return torch.Generator(device=\"cuda\")`), from train_gen.py:12",
                      lines[0])
        self.assertIn("it reached the CUDA runtime", lines[0])
        self.assertNotIn("oomharness/", lines[0], "no frame of the harness")

    def test_an_error_of_the_users_own_keeps_its_traceback(self):
        proc = run("""
            raise ValueError("the program's own")
        """)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("Traceback", proc.stderr)
        self.assertIn("ValueError: the program's own", proc.stderr)
        self.assertNotIn("virtual CUDA device cannot run", proc.stderr)

    def test_a_caught_unsupported_call_is_the_programs_own_business(self):
        self.check("""
            try:
                torch.cuda.CUDAGraph()
            except RuntimeError as e:
                print("caught", "cannot run torch.cuda.CUDAGraph" in str(e))
        """, "caught True")


if __name__ == "__main__":
    unittest.main()
