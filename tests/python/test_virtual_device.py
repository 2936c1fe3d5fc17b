"""The virtual CUDA device (Note [Which tensors are on the virtual device] in
python/oomharness/virtual_device/): unchanged CUDA code runs on the CPU, its device memory is
counted byte-exactly in the caching-allocator model, and running out raises PyTorch's own error."""
import json
import subprocess
import tempfile
import sys
import os
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(HERE, "..", "..", "python")

PRELUDE = """
import sys
sys.path.insert(0, %r)
import torch
from oomharness.virtual_device.allocator import round_size
""" % PY


def run(body, budget=1 << 30, device=True):
    """Runs `body` in a fresh interpreter (the device patches torch for the whole process); its stdout."""
    code = PRELUDE
    if device:
        code += "from oomharness.virtual_device import install_with_budget\ndev = install_with_budget(%d)\n" % budget
    code += textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    if proc.returncode != 0:
        raise AssertionError("the program failed:\n" + proc.stdout + proc.stderr)
    return proc.stdout


MLP = """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 16)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
params = sum(round_size(p.numel() * 4) for p in model.parameters())
losses = []
for step in range(3):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(64, 256, generator=g).cuda()
    y = torch.randint(0, 16, (64,), generator=g).cuda()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(round(loss.item(), 6))
del x, y, loss
"""


class VirtualDevice(unittest.TestCase):
    def test_an_mlp_with_adam_is_counted_byte_exactly(self):
        out = run(MLP + """
print(torch.cuda.is_available(), torch.cuda.device_count())
from oomharness.virtual_device import cublas_workspace_bytes
print(params, torch.cuda.memory_allocated(), cublas_workspace_bytes())
print(torch.cuda.memory_reserved() > 0, torch.cuda.max_memory_allocated() > 4 * params)
""")
        lines = out.split("\n")
        self.assertEqual(lines[0], "True 1")
        params, allocated, workspace = map(int, lines[1].split())
        self.assertEqual(workspace, 32 << 20, "PyTorch 2.x's default on Hopper: 8 buffers of 4 MiB")
        self.assertEqual(allocated, 4 * params + 2 * workspace + (1 << 20),
                         "parameters, gradients and Adam's two moments, each rounded to 512 B, the cuBLAS "
                         "workspaces of forward and backward, and cuBLASLt's of forward's Linear layers (Note "
                         "[cuBLASLt's workspace]: backward's matmuls have no bias)")
        self.assertEqual(lines[2], "True True", "the peak includes the activations")

    def test_cublas_workspaces_follow_their_setting_and_are_booked_once_per_direction(self):
        env_code = "import os\nos.environ['CUBLAS_WORKSPACE_CONFIG'] = ':4096:2:16:8'\n"
        out = run(env_code + """
a = torch.randn(64, 64, device="cuda", requires_grad=True)
before = torch.cuda.memory_allocated()
(a @ a).sum().backward()
(a @ a).sum().backward()
print(torch.cuda.memory_allocated() - before - round_size(64 * 64 * 4), sorted(w for w, _ in dev.libraries.workspaces))
""")
        self.assertEqual(out.split("\n")[0], "%d ['backward', 'forward']" % (2 * (2 * 4096 * 1024 + 8 * 16 * 1024)),
                         "two workspaces of :4096:2:16:8 and the gradient of a; the second step adds nothing")
        from importlib import import_module
        sys.path.insert(0, PY)
        vd = import_module("oomharness.virtual_device")
        self.assertEqual(vd.cublas_workspace_bytes(":4096:8"), 32 << 20)
        self.assertEqual(vd.cublas_workspace_bytes("garbage"), 32 << 20, "unreadable: the default")
        self.assertEqual(vd.cublas_workspace_bytes(":16:8:4096:2"), 8 * 16 * 1024 + 2 * 4096 * 1024)

    # Note [What libraries allocate outside the caching allocator] (issue 27): on an H100 under a cap, a correct
    # halving trainer died of cuBLAS's handle, made at the first matmul outside PyTorch's allocator. The budget
    # here is 200 MiB; the filler leaves less than a handle's bytes outside the allocator's segments.
    HANDLE = """
import os
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def step(batch):
    x = torch.randn(batch, 16, device="cuda")
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    return loss.item()
"""
    # All the free memory, as one segment (the budgets below leave a multiple of 2 MiB free at this point).
    FILL = "filler = torch.empty(torch.cuda.mem_get_info()[0] // 4, device='cuda')\n"

    def test_cublas_handle_refused_at_the_first_matmul_fails_like_on_a_gpu(self):
        out = run(self.HANDLE + self.FILL + """
try:
    step(2)
    print("no error")
except torch.OutOfMemoryError as e:
    print("caught as OutOfMemoryError")
except RuntimeError as e:
    print(type(e).__name__, str(e))
    from oomharness import probe
    print(probe.oom_kind(e).name)
del filler
torch.cuda.empty_cache()  # the filler's segment goes back to the driver: room for the handle
print(step(2) >= 0, sorted(k for k in dev.libraries.handles))
""", budget=200 << 20)
        lines = out.strip().split("\n")
        self.assertEqual(lines[0], "RuntimeError CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                         "PyTorch's TORCH_CUDABLAS_CHECK words it so; not an OutOfMemoryError")
        self.assertEqual(lines[1], "cublas", "the OOM table names it")
        self.assertEqual(lines[2], "True [('cublas', 'backward'), ('cublas', 'forward')]",
                         "a refused handle is asked for again at the next call, and backward makes its own")

    def test_a_warm_up_step_before_memory_fills_makes_the_handles_in_time(self):
        out = run(self.HANDLE + """
step(1)  # the warm-up: forward and backward, both threads' handles
""" + self.FILL + """
print(step(2) >= 0, sorted(k for k in dev.libraries.handles), torch.cuda.mem_get_info()[0])
""", budget=200 << 20)
        self.assertEqual(out.strip(), "True [('cublas', 'backward'), ('cublas', 'forward')] 0")

    def test_the_backward_threads_handle_comes_at_the_first_backward(self):
        # Forward alone made its handle; the first backward matmul, with the memory full, cannot make its own.
        out = run(self.HANDLE + """
with torch.no_grad():
    model(torch.randn(1, 16, device="cuda"))
""" + self.FILL + """
try:
    step(2)
except RuntimeError as e:
    print(type(e).__name__, "CUBLAS_STATUS_ALLOC_FAILED" in str(e), sorted(k for k in dev.libraries.handles))
""", budget=130 << 20)
        self.assertEqual(out.strip(), "RuntimeError True [('cublas', 'forward')]")

    def test_runtime_objects_a_correct_trainer_uses(self):
        # Events with timing, a side stream (its own cuBLAS workspace), synchronize, cudnn flags, autocast and
        # GradScaler run; CUDA graphs say clearly that they are not modelled.
        out = run("""
import os
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = False
m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2)).cuda()
opt = torch.optim.AdamW(m.parameters())
scaler = torch.amp.GradScaler("cuda")
side = torch.cuda.Stream()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for stream in (None, side):
    with torch.cuda.stream(stream):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = m(torch.randn(5, 3, 8, 8, device="cuda")).float().pow(2).mean()
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); opt.zero_grad()
    torch.cuda.current_stream().wait_stream(side)
end.record(); end.synchronize(); torch.cuda.synchronize()
print(start.elapsed_time(end) >= 0, sorted(dev.libraries.handles), len(dev.libraries.workspaces))
try:
    with torch.cuda.graph(torch.cuda.CUDAGraph()):
        pass
except RuntimeError as e:
    print(e)
print(torch.cuda.CUDAGraph | None)  # an annotation in Transformers' code: CUDAGraph stays a class
""")
        lines = out.strip().split("\n")
        self.assertEqual(lines[0], "True [('cublas', 'backward'), ('cublas', 'forward'), ('cudnn', 'backward'), "
                                   "('cudnn', 'forward')] 4", "one workspace per handle and stream")
        self.assertIn("CUDA graphs are not modelled", lines[1])
        self.assertEqual(lines[2], "torch.cuda.CUDAGraph | None")

    def test_cuda_autocast_runs_as_bfloat16_and_a_grad_scaler_steps_plainly(self):
        out = run("""
model = torch.nn.Linear(256, 256).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
x = torch.randn(128, 256, device="cuda")
with torch.autocast("cuda", dtype=torch.float16):
    y = model(x)
print(y.dtype, dev.on_device(y))
with torch.cuda.amp.autocast():
    loss = model(x).float().pow(2).mean()
before = model.weight.detach().clone()
scaler.scale(loss).backward()
scaler.step(opt)
scaler.update()
print(scaler.is_enabled(), bool((model.weight.detach() != before).any()))
print(sorted(dev.divergences))
""")
        lines = out.split("\n")
        self.assertEqual(lines[0], "torch.bfloat16 True", "activations take 2 bytes, as under float16 on a GPU")
        self.assertEqual(lines[1], "False True", "the scaler is off and the optimizer still stepped")
        self.assertEqual(lines[2], "['autocast', 'grad_scaler']")

    def test_cuda_autocast_casts_what_cudas_lists_cast(self):
        # Note [CUDA's autocast lists on the CPU]: measured on an H200, GPT-2's cross_entropy under bf16 autocast
        # ran log_softmax in bfloat16 and cast it to float32 for nll_loss; the CPU's autocast casts the logits.
        out = run("""
import torch.nn.functional as F
x = torch.randn(8, 64, device="cuda", requires_grad=True)
w = torch.randn(64, 64, device="cuda", requires_grad=True)
t = torch.randint(0, 64, (8,), device="cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    logits = x @ w
    loss = F.cross_entropy(logits, t)
    chain = []
    fn = loss.grad_fn
    while fn is not None and len(chain) < 4:
        chain.append(type(fn).__name__)
        fn = fn.next_functions[0][0] if fn.next_functions else None
    print(logits.dtype, loss.dtype, chain)
    print(F.layer_norm(logits, (64,)).dtype, F.softmax(logits, -1).dtype, logits.exp().dtype, logits.sum().dtype,
          torch.log_softmax(logits, -1, dtype=torch.bfloat16).dtype)
    try:
        F.binary_cross_entropy(torch.sigmoid(logits), torch.rand(8, 64, device="cuda"))
        print("bce ran")
    except RuntimeError as e:
        print("bce refused:", str(e).splitlines()[0])
loss.backward()
print(x.grad.dtype)
from oomharness import _job
_job.current().patches.uninstall("device.amp")
with torch.autocast("cpu", dtype=torch.bfloat16):
    print("cpu's lists again:", F.layer_norm(x @ w, (64,)).dtype)
""")
        lines = out.split("\n")
        self.assertEqual(lines[0], "torch.bfloat16 torch.float32 ['NllLossBackward0', 'ToCopyBackward0', "
                                   "'LogSoftmaxBackward0', 'MmBackward0']")
        # layer_norm, softmax (no dtype), exp and sum in float32, as CUDA's lists say; a dtype given stays.
        self.assertEqual(lines[1], "torch.float32 torch.float32 torch.float32 torch.float32 torch.bfloat16")
        self.assertEqual(lines[2], "bce refused: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are "
                                   "unsafe to autocast.")
        self.assertEqual(lines[3], "torch.float32")
        self.assertEqual(lines[4], "cpu's lists again: torch.bfloat16")

    def test_the_cuda_lists_are_the_installed_pytorchs(self):
        # ATen/autocast_mode.h of the torch under test, where its headers are installed: the CUDA lists the
        # device applies are the ones it was built with.
        import re
        import torch
        header = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "autocast_mode.h")
        if not os.path.exists(header):
            self.skipTest("this torch has no headers")
        sys.path.insert(0, PY)
        from oomharness.virtual_device import autocast_policy
        text = open(header).read()
        found = {}
        for macro, policy in (("LOWER_PRECISION_FP", "lower_precision_fp"), ("FP32", "fp32"),
                              ("FP32_SET_OPT_DTYPE", "fp32_set_opt_dtype"), ("PROMOTE", "promote")):
            body = re.search(r"#define AT_FORALL_%s\(_\)(.*?)(?:\n#|\n\n)" % macro, text, re.S).group(1)
            for name, overload in re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", body):
                found["%s.%s" % (name, overload or "default")] = policy
        self.assertGreater(len(found), 100, "the header's lists were read")
        self.assertEqual(set(found.values()), {"lower_precision_fp", "fp32", "fp32_set_opt_dtype", "promote"})
        expected = {k: v for k, v in autocast_policy.CUDA.items() if v in set(found.values())}
        self.assertEqual(found, expected)

    def test_the_device_says_what_it_is_and_where_it_diverged_in_the_event_log(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "events.jsonl")
            code = "import os\nos.environ['OOMH_EVENTS'] = %r\n" % log
            # The device must start after OOMH_EVENTS is set: install it in the program itself.
            proc = subprocess.run([sys.executable, "-c", PRELUDE + code + textwrap.dedent("""
                import threading
                from oomharness.virtual_device import install_with_budget
                dev = install_with_budget(1 << 30)
                for _ in range(2):
                    with torch.autocast("cuda"):
                        torch.nn.Linear(8, 8).cuda()(torch.randn(2, 8).cuda())
                t = threading.Thread(target=lambda: torch.zeros(4, device="cuda"))
                t.start(); t.join()
                print(torch.randn(4).pin_memory().shape)
                """)], capture_output=True, text=True, timeout=240)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            self.assertEqual(proc.stdout.strip(), "torch.Size([4])", "pin_memory works without pinned memory")
            with open(log) as f:
                events = [json.loads(line) for line in f]
        kinds = [e["kind"] for e in events]
        self.assertEqual(kinds[0], "virtual_device")
        self.assertIn("on the CPU, caching-allocator model", events[0]["fields"]["description"])
        divergences = [e["fields"]["kind"] for e in events if e["kind"] == "divergence"]
        self.assertEqual(divergences, ["autocast", "other_thread"], "each kind once")

    def test_attention_that_keeps_its_probabilities_is_named(self):
        out = run("""
a = torch.nn.MultiheadAttention(64, 4).cuda()
q = torch.randn(128, 2, 64).cuda()
a(q, q, q)
print(sorted(dev.divergences), int(torch.__version__.split(".")[0]))
""")
        kinds, major = out.split("\n")[0].rsplit(" ", 1)
        self.assertEqual(kinds, "['attention']")

    def test_default_device_and_torch_accelerator_on_pytorch_2(self):
        import torch
        if not hasattr(torch, "set_default_device"):
            self.skipTest("torch.set_default_device came with PyTorch 2.0 (this is %s)" % torch.__version__)
        out = run("""
torch.set_default_device("cuda")
x = torch.zeros(1 << 20)
layer = torch.nn.Linear(256, 256)
print(dev.on_device(x), dev.on_device(layer.weight), torch.get_default_device())
torch.set_default_device("cpu")
print(dev.on_device(torch.zeros(16)))
if hasattr(torch, "accelerator"):
    acc = torch.accelerator.current_accelerator()
    print(torch.accelerator.is_available(), acc, dev.on_device(torch.ones(8).to(acc)))
else:
    print("True cuda True")
""")
        lines = out.split("\n")
        self.assertEqual(lines[0], "True True cuda:0")
        self.assertEqual(lines[1], "False")
        self.assertEqual(lines[2], "True cuda True")

    def test_a_device_context_gives_its_device(self):
        # Note [A device context on the virtual device] (tensors.py): `with torch.device("meta")` makes meta tensors
        # (litgpt counts FLOPs on a meta copy of its model), `with torch.device("cuda")` books what its constructors
        # make, and the innermost context wins inside set_default_device("cuda").
        out = run("""
with torch.device("meta"):
    m = torch.nn.Linear(512, 512)
    x = torch.randint(0, 1, (4, 512))
print(m.weight.is_meta, x.is_meta, torch.cuda.memory_allocated())
with torch.device("cuda"):
    layer = torch.nn.Linear(256, 256, bias=False)
    w = torch.hann_window(1024)
print(dev.on_device(layer.weight), dev.on_device(w), torch.cuda.memory_allocated() >= 256 * 256 * 4 + 1024 * 4)
torch.set_default_device("cuda")
with torch.device("meta"):
    inner = torch.zeros(8)
outer = torch.zeros(8)
torch.set_default_device(None)
print(inner.is_meta, dev.on_device(outer), dev.on_device(torch.zeros(8)))
""")
        self.assertEqual(out.split("\n")[:3], ["True True 0", "True True True", "True True False"])

    def test_the_device_draws_from_its_own_generator(self):
        # Note [The CUDA generator's state] (runtime.py): DTensor's RNG tracker (torchtitan) sets CUDA's offset
        # before each random operation inside fork_rng, which restores the CPU's generator after it: the two draws
        # repeated each other when the device drew from the CPU's, and trunc_normal_'s rejection loop never ended.
        # Setting a state read before draws the same again; device draws leave the CPU's stream alone; a
        # checkpointed block's recomputation draws its dropout mask again exactly.
        out = run("""
import torch.utils.checkpoint as cp
torch.manual_seed(0)
x = torch.empty(8, device="cuda")
draws = []
for offset in (4, 8):
    with torch.random.fork_rng(devices=[0]):
        s = torch.cuda.get_rng_state()
        s[8:] = torch.tensor(list(offset.to_bytes(8, "little")), dtype=torch.uint8)
        torch.cuda.set_rng_state(s)
        draws.append(torch.empty_like(x).normal_())
state = torch.cuda.get_rng_state()
a = torch.randn(5, device="cuda")
torch.cuda.set_rng_state(state)
cpu = torch.get_rng_state()
b = torch.randn(5, device="cuda")
torch.nn.functional.dropout(torch.ones(100, device="cuda"), 0.5)
print(torch.equal(draws[0], draws[1]), torch.equal(a, b), torch.equal(cpu, torch.get_rng_state()))
lin = torch.nn.Linear(16, 16).cuda()
z = torch.randn(4, 16, device="cuda", requires_grad=True)
block = lambda v: torch.nn.functional.dropout(lin(v), 0.5, training=True)
torch.manual_seed(1)
cp.checkpoint(block, z, use_reentrant=False).sum().backward()
g, z.grad = z.grad.clone(), None
torch.manual_seed(1)
block(z).sum().backward()
print(torch.equal(g, z.grad))
""")
        self.assertEqual(out.split("\n")[:2], ["False True True", "True"])

    def test_a_device_per_local_rank(self):
        # Note [A device per local rank] (runtime.py): a rank of a 2-rank job counts 2 devices, takes its own with
        # set_device(LOCAL_RANK) (DDP then indexes its per-device streams by it: "list index out of range" with
        # one), and its tensors say so; torch.cuda.device(i) is the current device inside; an index past the
        # count is CUDA's error. Outside a distributed job there is one device.
        body = """
print(torch.cuda.device_count(), torch.cuda.current_device())
try:
    torch.cuda.set_device(1)
    x = torch.zeros(4, device="cuda")
    with torch.cuda.device(0):
        inside = torch.cuda.current_device()
    print(torch.cuda.current_device(), x.device, torch.cuda.Stream().device, inside, torch.accelerator.device_count())
    torch.cuda.set_device(2)
except RuntimeError as e:
    print("refused:", "invalid device ordinal" in str(e))
"""
        import os
        saved = os.environ.get("LOCAL_WORLD_SIZE")
        try:
            os.environ["LOCAL_WORLD_SIZE"] = "2"
            two = run(body).split("\n")
            del os.environ["LOCAL_WORLD_SIZE"]
            one = run(body).split("\n")
        finally:
            if saved is not None:
                os.environ["LOCAL_WORLD_SIZE"] = saved
        self.assertEqual(two[:3], ["2 0", "1 cuda:1 cuda:1 0 2", "refused: True"])
        self.assertEqual(one[:2], ["1 0", "refused: True"])

    def test_the_same_losses_as_on_the_cpu(self):
        on_device = run(MLP + "print(losses)\n")
        on_cpu = run(MLP.replace(".cuda()", "") + "print(losses)\n", device=False)
        self.assertEqual(on_device, on_cpu)

    def test_running_out_raises_pytorchs_error_and_recovery_works(self):
        out = run("""
kept = torch.zeros(3 << 20, device="cuda")            # 12 MiB of a 32 MiB device
try:
    torch.ones(8 << 20, device="cuda")                 # 32 MiB more: refused twice (the allocator's retry)
    print("no error")
except torch.cuda.OutOfMemoryError as e:
    print(type(e).__name__, isinstance(e, RuntimeError), "out of memory" in str(e))
    print(str(e)[:len("CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of 32.00 MiB of which 20.00 MiB is free")])
half = torch.ones(4 << 20, device="cuda")              # 16 MiB: fits
print(torch.cuda.memory_allocated() == round_size(12 << 20) + round_size(16 << 20))
print(torch.cuda.memory_stats()["num_ooms"])
""", budget=32 << 20)
        lines = out.split("\n")
        self.assertEqual(lines[0], "OutOfMemoryError True True")
        self.assertEqual(lines[1], "CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of 32.00 MiB of which 20.00 MiB is free")
        self.assertEqual(lines[2], "True")
        self.assertEqual(lines[3], "1")

    def test_oom_observers_hear_of_each_oom_the_allocator_gives_up_on(self):
        out = run("""
heard = []
torch._C._cuda_attach_out_of_memory_observer(lambda *a: heard.append(a))
kept = torch.zeros(3 << 20, device="cuda")
try:
    torch.ones(8 << 20, device="cuda")
except torch.cuda.OutOfMemoryError:
    pass
print(len(heard), heard[0][0], heard[0][1] == 32 << 20, heard[0][2] == round_size(12 << 20))
""", budget=32 << 20)
        self.assertEqual(out.split("\n")[0], "1 0 True True", "device, size, allocated, as PyTorch passes them")

    def test_cpu_copies_leave_the_device_and_freed_tensors_return_to_the_cache(self):
        out = run("""
x = torch.randn(1024, 1024).cuda()                     # 4 MiB
a = torch.cuda.memory_allocated()
h = x.cpu()                                            # a host copy: not device memory
h2 = x.to("cpu")
print(a, torch.cuda.memory_allocated() == a)
del x
print(torch.cuda.memory_allocated(), torch.cuda.memory_reserved() == 20 << 20)
torch.cuda.empty_cache()
print(torch.cuda.memory_reserved())
""")
        lines = out.split("\n")
        self.assertEqual(lines[0], "%d True" % (4 << 20))
        self.assertEqual(lines[1], "0 True", "freed, and kept in the 20 MiB segment's cache")
        self.assertEqual(lines[2], "0")

    def test_a_storage_resized_to_nothing_and_back_stays_the_devices(self):
        # Note [A storage resized on the device]: FSDP2's free_storage/alloc_storage between forward and backward.
        out = run("""
w = torch.randn(1024, 1024).cuda()                     # 4 MiB: an unsharded parameter
a = torch.cuda.memory_allocated()
s = w.untyped_storage()
s.resize_(0)                                           # after the forward: its memory goes back
print(torch.cuda.memory_allocated(), w.device, w.untyped_storage().nbytes())
s.resize_(0)                                           # to the size it has: still the device's
s.resize_(4 << 20)                                     # before the backward: back, at a new address
print(torch.cuda.memory_allocated() == a, w.device, (w + 1).device)
s.resize_(8 << 20)
print(torch.cuda.memory_allocated() - a)
h = torch.zeros(16)
h.untyped_storage().resize_(1 << 20)                   # a host storage stays the host's
print(h.device, torch.cuda.memory_allocated() - a)
del w, s
print(torch.cuda.memory_allocated())
# activation checkpointing's recomputation sees the weights where the forward saw them
lin = torch.nn.Linear(64, 64).cuda()
x = torch.randn(8, 64, device="cuda", requires_grad=True)
y = torch.utils.checkpoint.checkpoint(lin, x, use_reentrant=False)
lin.weight.untyped_storage().resize_(0)
lin.weight.untyped_storage().resize_(64 * 64 * 4)
y.sum().backward()
print("recomputed", x.grad.device)
""")
        lines = out.strip().split("\n")
        self.assertEqual(lines[0], "0 cuda:0 0")
        self.assertEqual(lines[1], "True cuda:0 cuda:0")
        self.assertEqual(lines[2], str(4 << 20))
        self.assertEqual(lines[3], "cpu %d" % (4 << 20))
        self.assertEqual(lines[4], "0")
        self.assertEqual(lines[5], "recomputed cuda:0")

    def test_a_memory_fraction_is_a_cap(self):
        out = run("""
torch.cuda.set_per_process_memory_fraction(0.25)
free, total = torch.cuda.mem_get_info()
print(total, free)
try:
    torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
    print("no error")
except torch.cuda.OutOfMemoryError:
    print("oom")
""", budget=1 << 30)
        lines = out.split("\n")
        self.assertEqual(lines[0], "%d %d" % (256 << 20, 256 << 20))
        self.assertEqual(lines[1], "oom")


class PinnedHostCache(unittest.TestCase):
    """Note [The pinned host cache] (python/oomharness/virtual_device/pinned.py): as PyTorch's CachingHostAllocator, the
    virtual device asks the driver only for a size class it holds no free block of, and reuses freed blocks
    (an H100 took no new cudaHostAlloc for a second pin after the first died)."""

    def test_freed_blocks_are_reused_and_sizes_rounded_to_a_power_of_two(self):
        out = run("""
import ctypes, gc
from oomharness.virtual_device import pinned as _pinned
calls = []
class Lib:
    pass
def host_alloc(pp, size, flags):
    calls.append(size)
    pp._obj.value = 4096 * len(calls)
    return 0 if len(calls) < 4 else _pinned.CUDA_ERROR_OUT_OF_MEMORY
lib = Lib()
lib.cuMemHostAlloc = host_alloc
lib.cuMemFreeHost = lambda p: calls.append(("free", p))
host = _pinned.PinnedHost(lib)
a = host.pin(torch.zeros(300 * 1024, dtype=torch.uint8))   # 300 KiB: a 512 KiB block
del a; gc.collect()
b = host.pin(torch.zeros(400 * 1024, dtype=torch.uint8))   # the same class: the freed block, no driver call
c = host.pin(torch.zeros(400 * 1024, dtype=torch.uint8))   # while b lives: a second block
d = host.pin(torch.zeros(1000, dtype=torch.uint8))         # another class: 1024 bytes
print(calls)
try:
    host.pin(torch.zeros(5000, dtype=torch.uint8))         # the driver refuses: PyTorch's error
except RuntimeError as e:
    print(type(e).__name__, str(e).splitlines()[0])
""", device=False)
        lines = out.strip().split("\n")
        self.assertEqual(lines[0], "[524288, 524288, 1024]", "a pin of a freed block's class asks the driver nothing")
        self.assertTrue(lines[1].endswith("CUDA error: out of memory"), lines[1])


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(os.environ.get("OOMH_BUILD_DIR"), "needs the build (OOMH_BUILD_DIR): run through ctest")
class ThroughTheRunner(unittest.TestCase):
    """A real PyTorch trainer, unchanged, run by `oomharness exec --simulate`: Python jobs get the virtual
    device, its segments go through the shim, and the checks judge it as on a GPU."""

    def exec(self, trainer_args, expects, cap="256MiB", extra=()):
        build = os.environ["OOMH_BUILD_DIR"]
        train = os.path.join(HERE, "..", "..", "examples", "python", "train.py")
        with tempfile.TemporaryDirectory() as out:
            argv = [os.path.join(build, "runner", "oomharness"), "exec", "--simulate", "--cap", cap, "--out", out] + list(extra)
            for e in expects:
                argv += ["--expect", e]
            argv += ["--", sys.executable, train, "--model", "mlp", "--steps", "4", "--batch", "4096"] + trainer_args
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            with open(os.path.join(out, "results.json")) as f:
                results = json.load(f)
            job = results["suites"][0]["jobs"][0]
            job["environment"] = results["environment"]
            with open(os.path.join(out, "report.html")) as f:
                job["html"] = f.read()
            events = ""
            for root, _, files in os.walk(os.path.join(out, "jobs")):
                for name in files:
                    if name.endswith(".events.jsonl"):
                        with open(os.path.join(root, name)) as f:
                            events += f.read()
            return proc, job, events

    def test_a_halving_trainer_passes_and_a_trainer_without_recovery_fails(self):
        proc, job, events = self.exec(["--recovery", "halve"], ["oom_visible", "batch_halving", "exit=0"])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(job["status"], "passed", job.get("message"))
        self.assertIn('"reason":"cap"', events, "the cap refused the model's segments, in the shim")
        # Note [Saying what was simulated]: every report says that no GPU ran it, and on what it ran.
        self.assertRegex(job.get("virtual_device", ""), r"^virtual CUDA device \(PyTorch .* on the CPU, caching-allocator model\)$")
        self.assertEqual(job["environment"]["virtual_device"], job["virtual_device"])
        self.assertIn("No GPU ran this job: it ran on the virtual CUDA device", proc.stdout)
        self.assertIn("absolute memory figures are modelled", job["html"])
        self.assertNotIn("device simulated (CPU driver double)", proc.stdout, "no job ran on the driver double")
        proc, job, _ = self.exec(["--recovery", "none"], ["oom_visible", "batch_halving"])
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertEqual(job["status"], "failed")
        self.assertIn("batch_halving", json.dumps(job["verdicts"]))

    def test_a_cap_that_counts_the_footprint_counts_an_h100s_context(self):
        # Note [The context on the virtual device]: 742 MiB of context beside 256 MiB for the training (128 MiB of it cuBLAS's handles).
        proc, job, events = self.exec(["--recovery", "halve"], ["oom_visible", "batch_halving", "exit=0"],
                                      cap="998MiB", extra=["--cap-counts", "footprint"])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        footprints = [json.loads(l) for l in events.splitlines() if '"kind":"footprint"' in l]
        self.assertTrue(footprints, "the shim measured the footprint through the NVML double")
        self.assertEqual(footprints[0]["fields"]["overhead"], 742 << 20)
        # The same cap counting allocations alone leaves the training 998 MiB: no OOM at batch 4096.
        proc, job, _ = self.exec(["--recovery", "halve"], ["exit=0"], cap="998MiB")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(job["faults"], [], "nothing refused without the context")


# A loop that counts its steps from 0, as most training logs do, and goes on after an OOM.
ZERO_BASED_LOOP = textwrap.dedent("""
    import torch
    model = torch.nn.Linear(1024, 1024).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(6):
        try:
            model(torch.randn(1024, 1024, device="cuda")).square().sum().backward()
            opt.step()
            print("step", step, "ok", flush=True)
        except torch.OutOfMemoryError:
            print("step", step, "oom", flush=True)
        opt.zero_grad(set_to_none=True)
""")


@unittest.skipUnless(os.environ.get("OOMH_BUILD_DIR"), "needs the build (OOMH_BUILD_DIR): run through ctest")
class StepBase(unittest.TestCase):
    """Note [Step numbering] (runner/src/suite/job_fields.cpp): `step=3` with step_base 0 is the step the
    code's own log calls 3, the 4th optimizer step; without it, the 3rd (the log's 2)."""

    def exec(self, extra):
        build = os.environ["OOMH_BUILD_DIR"]
        with tempfile.TemporaryDirectory() as out:
            script = os.path.join(out, "loop.py")
            with open(script, "w") as f:
                f.write(ZERO_BASED_LOOP)
            argv = [os.path.join(build, "runner", "oomharness"), "exec", "--simulate", "--out", out,
                    "--fault", "step=3,times=2", "--expect", "oom_visible"] + extra + ["--", sys.executable, script]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            with open(os.path.join(out, "results.json")) as f:
                job = json.load(f)["suites"][0]["jobs"][0]
            with open(os.path.join(out, "report.html")) as f:
                html = f.read()
            events = []
            for root, _, files in os.walk(os.path.join(out, "jobs")):
                for name in files:
                    if name.endswith(".events.jsonl"):
                        with open(os.path.join(root, name)) as f:
                            events += [json.loads(line) for line in f if '"src":"probe"' in line]
            return proc, job, html, events

    def probe_events(self, events, kind):
        return [e["fields"] for e in events if e["kind"] == kind]

    def test_step_3_with_step_base_0_hits_the_logs_step_3(self):
        proc, job, html, events = self.exec(["--step-base", "0"])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("step 3 oom", job["attempts"][-1]["output_tail"])
        self.assertIn("step 2 ok", job["attempts"][-1]["output_tail"])
        ooms = self.probe_events(events, "oom")
        self.assertEqual([o["step"] for o in ooms], [3])
        steps = [s["step"] for s in self.probe_events(events, "step")]
        self.assertEqual(steps[:3], [0, 1, 2], "the probe numbers the steps as the code does")
        self.assertEqual(job["step_base"], 0)
        self.assertIn("steps counted from 0", html)

    def test_without_it_step_3_is_the_third_step(self):
        proc, job, html, events = self.exec([])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("step 2 oom", job["attempts"][-1]["output_tail"])
        self.assertEqual([o["step"] for o in self.probe_events(events, "oom")], [3])
        self.assertEqual([s["step"] for s in self.probe_events(events, "step")][:2], [1, 2])
        self.assertEqual(job["step_base"], 1)
        self.assertIn("steps counted from 1", html)

    def test_a_bad_step_base_is_refused_naming_the_flag(self):
        build = os.environ["OOMH_BUILD_DIR"]
        proc = subprocess.run([os.path.join(build, "runner", "oomharness"), "exec", "--simulate", "--step-base", "2",
                               "--", "true"], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 4, proc.stdout + proc.stderr)
        self.assertIn("bad --step-base 2: 0 or 1", proc.stderr)


@unittest.skipUnless(os.environ.get("OOMH_BUILD_DIR"), "needs the build (OOMH_BUILD_DIR): run through ctest")
class ExecThreadsPerJob(unittest.TestCase):
    """Note [CPU share of packed jobs]: `exec --threads-per-job N` (what the pytest plugin passes each job
    under `pytest -n`) sets the job's OMP_NUM_THREADS, and a job's own env keeps its value."""

    def threads(self, extra):
        build = os.environ["OOMH_BUILD_DIR"]
        with tempfile.TemporaryDirectory() as out:
            argv = [os.path.join(build, "runner", "oomharness"), "exec", "--simulate", "--out", out] + extra + [
                "--", sys.executable, "-c", "import torch; print('THREADS', torch.get_num_threads())"]
            env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            with open(os.path.join(out, "results.json")) as f:
                tail = json.load(f)["suites"][0]["jobs"][0]["attempts"][-1]["output_tail"]
            return int(tail.split("THREADS")[1].split()[0])

    def test_the_flag_sets_the_jobs_threads_unless_its_env_does(self):
        self.assertEqual(self.threads(["--threads-per-job", "1"]), 1)
        self.assertEqual(self.threads(["--threads-per-job", "1", "--env", "OMP_NUM_THREADS=2"]), 2)
