"""The Python probe, run the way the runner runs it: sitecustomize on PYTHONPATH, a real control block in
/dev/shm, an event log, a child process that imports torch and trains on the CPU."""
import json
import os
import textwrap
import unittest

from harness import LINE, Job

# A small training loop with no oomharness in it: what the probe must understand on its own.
LOOP = textwrap.dedent("""
    import json, sys, torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(3):
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(json.dumps(losses))
""")

# An AdamW that has taken 4 steps (Note [A step is what the optimizer did]: the save-counter tests).
FOUR_ADAMW_STEPS = textwrap.dedent("""
    import sys, torch
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    for _ in range(4):
        model(torch.ones(4, 2)).sum().backward(); opt.step(); opt.zero_grad()
""")


class ProbeTest(unittest.TestCase):
    def setUp(self):
        self.job = Job()

    def tearDown(self):
        self.job.close()

    def check_lines(self):
        lines = self.job.lines()
        for line in lines:
            self.assertRegex(line, LINE)
            json.loads(line)
        return lines

    def test_silent_and_imports_nothing_without_the_harness(self):
        code = "import sys, json; print(json.dumps([sorted(m for m in sys.modules if m.startswith(('oomharness', 'torch'))), [type(f).__name__ for f in sys.meta_path]]))"
        r = self.job.run(code, probe=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        modules, finders = json.loads(r.stdout)
        self.assertEqual(modules, [])
        self.assertNotIn("TorchFinder", finders)

    def test_a_job_pays_for_the_evidence_its_checks_need(self):
        # Note [A probe that pays for what is checked] (include/oomharness/evidence.h): the runner says which
        # evidence the job's checks read (OOMH_EVIDENCE); the probe installs those parts only. Without any, a
        # step event carries its step, and the global module hooks are gone once training started (the lean
        # forwards of Note [Which forward is a model's]); the block still holds the step in progress.
        code = LOOP.replace("print(json.dumps(losses))", textwrap.dedent("""
            from torch.nn.modules import module as m
            print(json.dumps([len(m._global_forward_pre_hooks), len(m._global_forward_hooks)]))"""))
        seen = {}
        for evidence in ("", "batches", "batches,data,losses,memory", "all"):
            job = Job()
            try:
                r = job.run(code, extra_env={"OOMH_EVIDENCE": evidence})
                self.assertEqual(r.returncode, 0, r.stderr)
                steps = [e["fields"] for e in job.read_events() if e["kind"] == "step"]
                self.assertEqual([s["step"] for s in steps], [1, 2, 3], evidence)
                seen[evidence] = (sorted(steps[-1]), json.loads(r.stdout.splitlines()[-1]), job.block()["step"])
            finally:
                job.close()
        self.assertEqual(seen[""], (["step"], [0, 0], 4), "no evidence: the step alone, and no module hook left")
        self.assertEqual(seen["batches"][0], ["batch_from", "batch_size", "step"])
        self.assertEqual(seen["batches"][1], [0, 0], "batch sizes need only the model's own forwards")
        self.assertEqual(seen["batches,data,losses,memory"][1], [1, 1], "data needs every module's forward")
        # (No memory figures on the CPU: no CUDA is in use.)
        # (data brings the grads part: when the gradients are cleared, Note [Micro-batches an OOM leaves].)
        self.assertEqual(seen["batches,data,losses,memory"][0],
                         ["batch_from", "batch_size", "data", "grads_cleared", "loss", "step"])
        self.assertEqual(seen["all"][0], ["batch_from", "batch_size", "data", "grads_cleared", "loss", "step"],
                         "'all' is every part, as with no variable")

    def test_an_optimizer_that_steps_others_is_one_step(self):
        # Note [An optimizer inside another's step]: torchtitan's OptimizersContainer is an Optimizer that steps
        # one optimizer per model part; a step that raised leaves its optimizer on the stack until it steps again.
        code = textwrap.dedent("""
            import json, torch
            torch.manual_seed(0)
            parts = [torch.nn.Linear(6, 6), torch.nn.Linear(6, 3)]
            class Container(torch.optim.Optimizer):
                def __init__(self, parts):
                    self.inner = [torch.optim.AdamW(p.parameters(), lr=0.01) for p in parts]
                    super().__init__([q for p in parts for q in p.parameters()], {"lr": 0.01})
                def step(self, closure=None):
                    for o in self.inner:
                        o.step()
                def zero_grad(self, set_to_none=True):
                    for o in self.inner:
                        o.zero_grad(set_to_none=set_to_none)
            opt = Container(parts)
            model = torch.nn.Sequential(*parts)
            x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
            for i in range(3):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            # an optimizer's step that raises (its post-hooks never run), then the next steps
            boom = torch.optim.SGD(model.parameters(), lr=0.1)
            boom.register_step_pre_hook(lambda *a: (_ for _ in ()).throw(RuntimeError("no")) if boom.fail else None)
            boom.fail = True
            try:
                boom.step()
            except RuntimeError:
                pass
            boom.fail = False
            boom.step()
            boom.step()
        """)
        r = self.job.run(code, extra_env={"OOMH_EVIDENCE": "batches,grads,evaluation"})
        self.assertEqual(r.returncode, 0, r.stderr)
        steps = [e["fields"] for e in self.job.read_events() if e["kind"] == "step"]
        self.assertEqual([s["step"] for s in steps], [1, 2, 3, 4, 5], steps)
        self.assertEqual([s.get("grads_cleared") for s in steps[:3]], [None, True, True], steps)

    def test_a_head_the_loss_calls_is_part_of_the_models_step(self):
        # Note [A part of a model called on its own]: torchtitan's chunked loss calls the model's lm_head after
        # the model's forward; a network called directly while its parent's forward ran in another step stays
        # the model (a LightningModule's training_step).
        code = textwrap.dedent("""
            import torch
            torch.manual_seed(0)
            class LM(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = torch.nn.Linear(8, 8)
                    self.head = torch.nn.Linear(8, 5)
                def forward(self, x):
                    return self.body(x)
            model = LM()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
            for i in range(2):
                opt.zero_grad()
                h = model(x)
                loss = sum(torch.nn.functional.cross_entropy(model.head(c), t) for c, t in zip(h.chunk(3), y.chunk(3)))
                loss.backward()
                opt.step()
            for i in range(2):  # the parent's forward does not run in these steps: the body is the model
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model.body(x)[:, :5], y).backward()
                opt.step()
        """)
        r = self.job.run(code, extra_env={"OOMH_EVIDENCE": "all"})
        self.assertEqual(r.returncode, 0, r.stderr)
        events = self.job.read_events()
        steps = [e["fields"] for e in events if e["kind"] == "step"]
        samples = [e["fields"]["count"] for e in events if e["kind"] == "samples"]
        self.assertEqual([s["step"] for s in steps], [1, 2, 3, 4])
        self.assertEqual(samples, [6, 6, 6, 6], samples)
        self.assertEqual([s["data"]["samples"] for s in steps], [6, 6, 6, 6], steps)

    def test_a_distributed_checkpoint_is_one_save_and_one_load(self):
        # Note [A DCP checkpoint is one checkpoint]: torch.distributed.checkpoint writes each item through
        # torch.save on a stream; the probe reports the folder once, by the state dict's tensors, and a step
        # torch takes inside the load to make the optimizer's state is not a training step.
        folder = os.path.join(self.job.dir, "ck")
        code = textwrap.dedent("""
            import sys, torch
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.stateful import Stateful
            from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
            opt = torch.optim.AdamW(model.parameters(), lr=0.01)
            class App(Stateful):
                def state_dict(self):
                    m, o = get_state_dict(model, opt)
                    return {"model": m, "optim": o}
                def load_state_dict(self, sd):
                    set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
            x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
            def step():
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            if sys.argv[1] == "save":
                for i in range(3):
                    step()
                dcp.save({"app": App()}, checkpoint_id=sys.argv[2])
            else:
                dcp.load({"app": App()}, checkpoint_id=sys.argv[2])
                step()
        """)
        r = self.job.run(code, extra_env={"OOMH_EVIDENCE": "all"}, args=("save", folder))
        self.assertEqual(r.returncode, 0, r.stderr)
        saves = [e["fields"] for e in self.job.read_events() if e["kind"] == "checkpoint_save"]
        self.assertEqual([(s["path"], s["step"]) for s in saves], [(folder, 3)], saves)
        self.assertGreater(saves[0]["tensors"], 4)  # the model's and the optimizer's tensors
        again = Job()
        try:
            r = again.run(code, extra_env={"OOMH_EVIDENCE": "all"}, args=("load", folder))
            self.assertEqual(r.returncode, 0, r.stderr)
            events = again.read_events()
            kinds = [e["kind"] for e in events if e["kind"] in ("step", "checkpoint_load", "checkpoint_save")]
            self.assertEqual(kinds, ["checkpoint_load", "step"], kinds)
            load = [e["fields"] for e in events if e["kind"] == "checkpoint_load"][0]
            self.assertEqual((load["path"], load["digest"]), (folder, saves[0]["digest"]))
            self.assertEqual([e["fields"]["step"] for e in events if e["kind"] == "step"], [4])
        finally:
            again.close()

    def test_a_step_waits_for_the_gpu_only_where_a_check_reads_the_loss(self):
        # Note [A probe that pays for what is checked] (include/oomharness/evidence.h): on a GPU a tensor read as
        # a Python number (.item(), float(t), bool(t), .tolist(): aten._local_scalar_dense), a copy to the host,
        # a synchronize or a reading of the allocator's statistics waits for the step's kernels or costs a
        # call into the allocator. The lean probe and every job's default one do none of it per step; the
        # losses part reads one number per step (which shows the count sees it). CUDA is said to be in use
        # (torch.cuda.is_initialized), so that the probe takes its GPU branches on the CPU too; the CUDA
        # functions are counted, not called.
        code = textwrap.dedent("""
            import collections, json, torch
            from torch.utils._python_dispatch import TorchDispatchMode
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
            def step():
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            step()  # the first step: the lean forwards part takes its global hooks out (Note [Which forward is a model's])
            seen = collections.Counter()
            WAITS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten._to_copy.default,
                     torch.ops.aten.copy_.default)
            class Count(TorchDispatchMode):
                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    if func in WAITS:
                        seen[str(func)] += 1
                    return func(*args, **(kwargs or {}))
            def counted(name):
                def call(*args, **kwargs):
                    seen[name] += 1
                    raise RuntimeError("counted, not called")
                return call
            torch.cuda.is_initialized = lambda: True
            for name in ("synchronize", "memory_allocated", "memory_reserved", "memory_stats", "mem_get_info",
                         "max_memory_allocated", "max_memory_reserved"):
                setattr(torch.cuda, name, counted("torch.cuda." + name))
            for name in ("synchronize", "query", "elapsed_time"):
                setattr(torch.cuda.Event, name, counted("torch.cuda.Event." + name))
            torch._C._cuda_memoryStats = counted("torch._C._cuda_memoryStats")
            with Count():
                for _ in range(5):
                    step()
            print(json.dumps(dict(seen)))
        """)
        per_step = {}
        for evidence in ("", "batches,grads,evaluation", "losses"):
            job = Job()
            try:
                r = job.run(code, extra_env={"OOMH_EVIDENCE": evidence})
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(len([k for k in job.kinds() if k == "step"]), 6, evidence)
                per_step[evidence] = {k: v / 5 for k, v in json.loads(r.stdout.splitlines()[-1]).items()}
            finally:
                job.close()
        self.assertEqual(per_step[""], {}, "the lean probe waits for nothing")
        self.assertEqual(per_step["batches,grads,evaluation"], {}, "every job's default probe waits for nothing")
        self.assertEqual(per_step["losses"], {"aten._local_scalar_dense.default": 1.0}, "the loss: one read a step")

    def test_the_lean_probe_hears_the_models_own_forwards(self):
        # Note [One model's forwards] (probe/forwards.py): with the findings' evidence only (what every job gets:
        # Note [Findings on every job] in policies/findings.h), the batch size of each step and each evaluation
        # are heard through the model's class, no global hook is left, the model still pickles whole and
        # deep-copies (no hook in its __dict__), another Sequential is not heard, and uninstalling gives the
        # class back.
        code = LOOP.replace("print(json.dumps(losses))", textwrap.dedent("""
            import copy, io
            from torch.nn.modules import module as m
            other = torch.nn.Sequential(torch.nn.Linear(6, 2))
            with torch.no_grad():
                other(torch.randn(5, 6))
                model.eval()
                model(torch.randn(4, 6))
            buf = io.BytesIO()
            torch.save(model, buf)
            twin = copy.deepcopy(model)
            hooks = [len(m._global_forward_pre_hooks), len(m._global_forward_hooks), len(model._forward_pre_hooks)]
            patched = "__call__" in torch.nn.Sequential.__dict__
            from oomharness import _job
            _job.current().probe.uninstall()
            print(json.dumps([hooks, patched, "__call__" in torch.nn.Sequential.__dict__, buf.tell() > 0]))"""))
        job = Job()
        try:
            r = job.run(code, extra_env={"OOMH_EVIDENCE": "batches,grads,evaluation"})
            self.assertEqual(r.returncode, 0, r.stderr)
            events = job.read_events()
            self.assertEqual([e["fields"].get("batch_size") for e in events if e["kind"] == "step"], [8, 8, 8])
            evals = [e["fields"] for e in events if e["kind"] == "eval_forward"]
            self.assertEqual([(e["grad"], e["training"], e["batch_size"]) for e in evals], [(False, False, 4)],
                             "the model's evaluation, not the other Sequential's forward")
            self.assertEqual(json.loads(r.stdout.splitlines()[-1]), [[0, 0, 0], True, False, True])
        finally:
            job.close()

    def test_a_step_trains_on_its_forward_whatever_comes_between(self):
        # Note [Micro-batches an OOM leaves] (probe/batches.py): zero_grad between a forward and its backward (the
        # commonest loop: out = model(x); opt.zero_grad(); loss.backward()) keeps that forward in the step's data;
        # accumulating two micro-batches after a zero_grad counts both.
        code = textwrap.dedent("""
            import torch
            torch.manual_seed(0)
            model = torch.nn.Linear(6, 3)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(2):
                out = model(torch.randn(8, 6))
                opt.zero_grad()
                out.sum().backward()
                opt.step()
            opt.zero_grad()
            for k in range(2):
                model(torch.randn(4, 6)).sum().backward()
            opt.step()
        """)
        job = Job()
        try:
            r = job.run(code, extra_env={"OOMH_EVIDENCE": "batches,data"})
            self.assertEqual(r.returncode, 0, r.stderr)
            steps = [e["fields"] for e in job.read_events() if e["kind"] == "step"]
            self.assertEqual([(s["step"], s.get("data", {}).get("samples")) for s in steps], [(1, 8), (2, 8), (3, 8)])
            samples = [e["fields"]["count"] for e in job.read_events() if e["kind"] == "samples"]
            self.assertEqual(samples, [8, 8, 8])
        finally:
            job.close()

    def test_a_block_recomputed_in_backward_is_not_a_forward_of_the_step(self):
        # Note [A forward recomputed in backward] (probe/forwards.py): activation checkpointing runs each block's
        # forward again inside the backward, with the reentrant checkpoint and the non-reentrant one; the step's
        # data and samples are its own forward's. A second model's forward between two steps still counts.
        code = textwrap.dedent("""
            import torch
            from torch.utils.checkpoint import checkpoint
            torch.manual_seed(0)
            class Net(torch.nn.Module):
                def __init__(self, reentrant):
                    super().__init__()
                    self.blocks = torch.nn.ModuleList(torch.nn.Linear(6, 6) for _ in range(3))
                    self.reentrant = reentrant
                def forward(self, x):
                    for b in self.blocks:
                        x = checkpoint(b, x, use_reentrant=self.reentrant)
                    return x
            for reentrant in (True, False):
                model = Net(reentrant)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for step in range(2):
                    model(torch.randn(8, 6, requires_grad=reentrant)).sum().backward()
                    opt.step()
                    opt.zero_grad()
        """)
        job = Job()
        try:
            r = job.run(code, extra_env={"OOMH_EVIDENCE": "batches,data"})
            self.assertEqual(r.returncode, 0, r.stderr)
            events = job.read_events()
            steps = [e["fields"] for e in events if e["kind"] == "step"]
            self.assertEqual([(s.get("data", {}).get("samples"), "parts" in s.get("data", {})) for s in steps],
                             [(8, False)] * 4)
            self.assertEqual([e["fields"]["count"] for e in events if e["kind"] == "samples"], [8] * 4)
        finally:
            job.close()

    def test_the_state_a_recurrent_model_is_given_is_not_its_data(self):
        # Note [State the model returned is not data] (probe/batches.py): the same tokens with the state carried
        # from the step before (detached) or a fresh zero state are the same data; a float input beside them
        # that is neither (noise per sample) still is data.
        code = textwrap.dedent("""
            import torch
            torch.manual_seed(0)
            class LM(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.emb = torch.nn.Embedding(50, 8)
                    self.rnn = torch.nn.LSTM(8, 8)
                def forward(self, tokens, hidden, noise=None):
                    out, hidden = self.rnn(self.emb(tokens), hidden)
                    return (out if noise is None else out + noise), hidden
            model = LM()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            data = [torch.randint(0, 50, (5, 4), generator=torch.Generator().manual_seed(k)) for k in range(3)]
            zeros = lambda: (torch.zeros(1, 4, 8), torch.zeros(1, 4, 8))
            for mode in ("carried", "fresh", "noise"):
                hidden = zeros()
                for tokens in data:
                    if mode == "fresh":
                        hidden = zeros()
                    noise = torch.randn(5, 4, 8) if mode == "noise" else None
                    out, hidden = model(tokens, hidden, noise)
                    hidden = tuple(h.detach() for h in hidden)
                    out.sum().backward()
                    opt.step()
                    opt.zero_grad()
        """)
        job = Job()
        try:
            r = job.run(code, extra_env={"OOMH_EVIDENCE": "batches,data"})
            self.assertEqual(r.returncode, 0, r.stderr)
            digests = [e["fields"]["data"]["digest"] for e in job.read_events() if e["kind"] == "step"]
            self.assertEqual(len(digests), 9)
            self.assertEqual(digests[0:3], digests[3:6], "the carried state and a fresh one are not the data")
            self.assertEqual(len(set(digests[0:3])), 3)
            self.assertTrue(all(a != b for a, b in zip(digests[0:3], digests[6:9])), "noise beside the tokens is data")
        finally:
            job.close()

    def test_a_spec_looked_up_first_still_installs_the_probe(self):
        # Note [Waiting for torch] (_boot.py): Transformers and Datasets call importlib.util.find_spec("torch") at
        # their own import, before anything imports torch; the import that follows must still get the probe.
        code = "import importlib.util\nassert importlib.util.find_spec('torch') is not None\n" + LOOP
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([e["fields"]["step"] for e in self.job.read_events() if e["kind"] == "step"], [1, 2, 3])

    def test_waits_for_torch_and_never_imports_it(self):
        code = "import sys; print('torch' in sys.modules, any(type(f).__name__ == 'TorchFinder' for f in sys.meta_path))"
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["False", "True"])
        self.assertEqual(self.job.lines(), [], "no torch, no events")

    def test_chains_to_the_sitecustomize_it_hides(self):
        other = os.path.join(self.job.dir, "other")
        os.makedirs(other)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("import builtins\nbuiltins.OTHER_SITECUSTOMIZE_RAN = True\n")
        for probe in (False, True):
            r = self.job.run("import builtins; print(getattr(builtins, 'OTHER_SITECUSTOMIZE_RAN', False))",
                             probe=probe, extra_env={"PYTHONPATH": self.job.env()["PYTHONPATH"] + os.pathsep + other})
            self.assertEqual(r.stdout.strip(), "True", r.stderr)

    def test_steps_batch_size_loss_and_block_from_a_plain_loop(self):
        r = self.job.run(LOOP)
        self.assertEqual(r.returncode, 0, r.stderr)
        losses = json.loads(r.stdout)
        self.check_lines()
        events = self.job.read_events()
        self.assertEqual(events[0]["kind"], "probe_start")
        self.assertEqual(events[0]["fields"]["framework"], "torch")
        steps = [e["fields"] for e in events if e["kind"] == "step"]
        self.assertEqual([s["step"] for s in steps], [1, 2, 3])
        self.assertEqual([s["batch_size"] for s in steps], [8, 8, 8])
        for s, loss in zip(steps, losses):
            self.assertAlmostEqual(s["loss"], loss, places=6)
        self.assertEqual([e["fields"]["count"] for e in events if e["kind"] == "samples"], [8, 8, 8])
        self.assertEqual(events[-1]["kind"], "probe_exit")
        block = self.job.block()
        self.assertEqual(block["step"], 4, "the block holds the step in progress")
        self.assertEqual(block["batch_size"], 8)
        self.assertEqual(block["phase"], "data")
        self.assertEqual(block["events_written"], len(events))

    def test_batch_of_keyword_inputs_and_of_the_loader(self):
        # Note [The batch the code did not report] (probe/batches.py), issue 27: `model(**batch)` (Hugging Face,
        # Accelerate, Lightning) gives the global forward pre-hook no tensor; the batch is read from the call's
        # keyword arguments. A model whose inputs hold no tensor (a list of strings) has the DataLoader's
        # count. Each step says where its batch came from; probe.step(batch_size=) says "code".
        code = textwrap.dedent("""
            import torch
            from oomharness import probe
            class KW(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lin = torch.nn.Linear(6, 3)
                def forward(self, input_ids=None, labels=None):
                    return torch.nn.functional.cross_entropy(self.lin(input_ids), labels)
            class Words(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = torch.nn.Parameter(torch.ones(1))
                def forward(self, words):
                    return self.w.sum() * len(words)
            kw, words = KW(), Words()
            opt = torch.optim.SGD(list(kw.parameters()) + list(words.parameters()), lr=0.1)
            data = [{"input_ids": torch.randn(6), "labels": torch.tensor(i % 3)} for i in range(10)]
            for batch in torch.utils.data.DataLoader(data, batch_size=5):
                opt.zero_grad(); kw(**batch).backward(); opt.step()
            loader = torch.utils.data.DataLoader(["a", "b", "c", "d", "e", "f"], batch_size=3,
                                                 collate_fn=lambda xs: xs)
            for batch in loader:
                opt.zero_grad(); words(batch).backward(); opt.step()
            probe.step(5, batch_size=7)
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        steps = [e["fields"] for e in self.job.read_events() if e["kind"] == "step"]
        self.assertEqual([(s["step"], s.get("batch_size"), s.get("batch_from")) for s in steps],
                         [(1, 5, "inputs"), (2, 5, "inputs"), (3, 3, "loader"), (4, 3, "loader"), (5, 7, "code")])

    def test_keyword_inputs_of_another_frame_are_not_taken(self):
        # call_kwargs takes `kwargs` only from the frame of the module's own call: a caller's `kwargs` that
        # holds a tensor is not the model's input.
        code = textwrap.dedent("""
            import torch
            class NoInput(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.p = torch.nn.Parameter(torch.ones(2))
                def forward(self):
                    return self.p.sum()
            m = NoInput()
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            def train(**kwargs):
                opt.zero_grad(); m().backward(); opt.step()
            train(x=torch.ones(9, 2))
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        steps = [e["fields"] for e in self.job.read_events() if e["kind"] == "step"]
        self.assertEqual(len(steps), 1)
        self.assertNotIn("batch_size", steps[0])

    def test_output_is_unchanged_by_the_probe(self):
        with_probe = self.job.run(LOOP)
        without = self.job.run(LOOP, probe=False)
        self.assertEqual(with_probe.stdout, without.stdout)
        self.assertEqual(with_probe.stderr, without.stderr)

    def test_phases_reach_the_control_block(self):
        code = textwrap.dedent("""
            import json, torch
            from oomharness import _control, probe
            import os
            cb = _control.ControlBlock.open(os.environ["OOMH_CONTROL"])
            seen = []
            class Spy(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lin = torch.nn.Linear(4, 4)
                def forward(self, x):
                    seen.append(("forward" if torch.is_grad_enabled() else "eval forward", cb.phase, cb.step, cb.batch_size))
                    return self.lin(x)
            model = torch.nn.Sequential(Spy(), torch.nn.Linear(4, 2))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            seen.append(("before", cb.phase, cb.step, cb.batch_size))
            out = model(torch.randn(5, 4))
            out.register_hook(lambda g: seen.append(("backward", cb.phase, cb.step, cb.batch_size)))
            out.sum().backward()
            opt.step()
            seen.append(("after step", cb.phase, cb.step, cb.batch_size))
            with torch.no_grad():
                model(torch.randn(3, 4))
            seen.append(("eval", cb.phase, cb.step, cb.batch_size))
            class Probe:
                def __reduce__(self):
                    seen.append(("checkpoint", cb.phase, cb.step, cb.batch_size))
                    return (int, (0,))
            torch.save({"x": Probe()}, "ck.pt")
            probe.phase("optimizer")
            seen.append(("explicit", cb.phase, cb.step, cb.batch_size))
            print(json.dumps(seen))
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        seen = {name: (phase, step, bs) for name, phase, step, bs in json.loads(r.stdout)}
        self.assertEqual(seen["before"], ("none", -1, -1))
        self.assertEqual(seen["forward"], ("forward", 1, 5))
        self.assertEqual(seen["backward"], ("backward", 1, 5))
        self.assertEqual(seen["after step"], ("data", 2, 5))
        self.assertEqual(seen["eval forward"], ("eval", 2, 3))
        self.assertEqual(seen["eval"], ("eval", 2, 3))
        self.assertEqual(seen["checkpoint"][0], "checkpoint")
        self.assertEqual(seen["explicit"][0], "optimizer")

    def test_save_and_load_report_paths_and_steps(self):
        code = textwrap.dedent("""
            import torch
            model = torch.nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.ones(4, 2)).sum().backward(); opt.step()
            torch.save({"step": 7, "model": model.state_dict()}, "ck.pt")
            torch.save(torch.zeros(2), "plain.pt")
            state = torch.load("ck.pt")
            model(torch.ones(4, 2)).sum().backward(); opt.step()
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        events = self.job.read_events()
        saves = [e["fields"] for e in events if e["kind"] == "checkpoint_save"]
        loads = [e["fields"] for e in events if e["kind"] == "checkpoint_load"]
        self.assertEqual([(os.path.basename(s["path"]), s["step"]) for s in saves], [("ck.pt", 7), ("plain.pt", 1)])
        self.assertEqual([(os.path.basename(s["path"]), s["step"]) for s in loads], [("ck.pt", 7)])
        steps = [e["fields"]["step"] for e in events if e["kind"] == "step"]
        self.assertEqual(steps, [1, 8], "counting goes on from the loaded checkpoint's step")

    def test_a_counter_below_the_restored_optimizers_count_is_not_the_step(self):
        # Note [A step is what the optimizer did]: Accelerate's load_state reads optimizer.bin (AdamW, 4 steps
        # taken) and then random_states_0.pkl, whose `step` is its accumulation position, 0. The resumed steps
        # went on from 1 ("training stopped at step 4 of 8"). A counter at or above the optimizer's count is
        # still taken (a checkpoint's own step, the explicit API).
        code = FOUR_ADAMW_STEPS + textwrap.dedent("""
            torch.save(opt.state_dict(), "optimizer.bin")
            torch.save({"step": int(sys.argv[1]), "python": 1}, "random_states_0.pkl")
        """)
        resume = textwrap.dedent("""
            import torch
            model = torch.nn.Linear(2, 2)
            opt = torch.optim.AdamW(model.parameters(), lr=0.1)
            opt.load_state_dict(torch.load("optimizer.bin"))
            torch.load("random_states_0.pkl")
            model(torch.ones(4, 2)).sum().backward(); opt.step()
        """)
        for counter, first in ((0, 5), (6, 7)):
            with self.subTest(counter=counter):
                before = len(self.job.lines())
                self.assertEqual(self.job.run(code, args=[str(counter)]).returncode, 0)
                # The save is numbered the same way: random_states_0.pkl written after optimizer.bin's 4 steps is
                # the checkpoint of step 4, not of step 0 (on 2 GPUs checkpoint_resume expected step 1).
                saves = [(os.path.basename(e["fields"]["path"]), e["fields"]["step"])
                         for e in self.job.read_events()[before:] if e["kind"] == "checkpoint_save"]
                self.assertEqual(saves, [("optimizer.bin", 4), ("random_states_0.pkl", max(counter, 4))])
                before = len(self.job.lines())
                r = self.job.run(resume)
                self.assertEqual(r.returncode, 0, r.stderr)
                steps = [e["fields"]["step"] for e in self.job.read_events()[before:] if e["kind"] == "step"]
                self.assertEqual(steps, [first])

    def test_a_save_below_its_own_optimizers_count_is_numbered_by_the_probe(self):
        # Note [A step is what the optimizer did]: Accelerate's rank 1 writes only random_states_1.pkl (`step` 0,
        # its accumulation position) while its AdamW has taken 4 steps: the checkpoint of step 4 (it "lost 4
        # steps" under max_lost_steps). A counter from 0 (3 after 4 steps) is still taken as the program's.
        code = FOUR_ADAMW_STEPS + textwrap.dedent("""
            torch.save({"step": int(sys.argv[1]), "python": 1}, "random_states_1.pkl")
        """)
        for counter, step in ((0, 4), (3, 3), (9, 9)):
            with self.subTest(counter=counter):
                before = len(self.job.lines())
                self.assertEqual(self.job.run(code, args=[str(counter)]).returncode, 0)
                saves = [e["fields"]["step"] for e in self.job.read_events()[before:] if e["kind"] == "checkpoint_save"]
                self.assertEqual(saves, [step])

    def test_a_model_on_the_meta_device_is_not_a_models_forward(self):
        # Note [A model on the meta device] (forwards.py): litgpt's fit() runs a meta copy of its model forward and
        # backward to count FLOPs after the resume's load. It started the step and its meta input became part
        # of the step's data; its state matched no loaded checkpoint. Checked with every part and with the
        # lean probe (which then watched the meta model instead of the one that trains).
        code = textwrap.dedent("""
            import torch
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 4)
            torch.save({"model": model.state_dict(), "step": 3}, "ck.pt")
            model.load_state_dict(torch.load("ck.pt")["model"])
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            with torch.device("meta"):
                meta = torch.nn.Linear(4, 4)
            meta(torch.ones(4, 4, device="meta")).sum().backward()
            for _ in range(2):
                model(torch.ones(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
        """)
        # With every part the steps go on from the checkpoint's; the lean part with batches numbers from 1 (it
        # reads no checkpoint) and hears the model it watches through its class.
        for evidence, first in (("all", 4), ("batches", 1)):
            with self.subTest(evidence=evidence):
                before = len(self.job.lines())
                r = self.job.run(code, extra_env={"OOMH_EVIDENCE": evidence})
                self.assertEqual(r.returncode, 0, r.stderr)
                events = self.job.read_events()[before:]
                states = [(e["fields"]["model"], e["fields"]["unmatched"]) for e in events if e["kind"] == "model_state"]
                steps = [(e["fields"]["step"], e["fields"].get("batch_size")) for e in events if e["kind"] == "step"]
                if evidence == "all":
                    self.assertEqual(states, [("Linear", 0)])
                self.assertEqual(steps, [(first, 2), (first + 1, 2)], "the meta model's batch of 4 is no step's")

    def test_empty_cache_is_recorded_and_safe_on_cpu(self):
        r = self.job.run("import torch\ntorch.cuda.empty_cache()\ntorch.cuda.memory.empty_cache()\nprint(torch.cuda.is_initialized())")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "False", "the wrapper must not initialise CUDA")
        events = [e for e in self.job.read_events() if e["kind"] == "empty_cache"]
        self.assertEqual(len(events), 2)
        self.assertEqual(events[0]["fields"], {"reserved_before": 0, "reserved_after": 0})
        self.assertEqual(self.job.block()["empty_cache_calls"], 2)

    def test_empty_cache_records_what_the_cache_held_free(self):
        # No GPU here: stand in for the caching allocator's figures. A whole free segment goes back; a free
        # block split off a segment a live tensor uses (inactive_split) does not; without those statistics
        # (a backend that keeps none) what is reserved and not allocated counts as free.
        fake = textwrap.dedent("""
            import torch
            MiB = 1 << 20
            state = {"allocated": 3 * MiB, "active": 3 * MiB, "split": 2 * MiB, "whole": 0, "stats": True}
            reserved = lambda: state["allocated"] + state["split"] + state["whole"]
            def stats():
                if not state["stats"]:
                    return {}
                return {"reserved_bytes.all.current": reserved(), "active_bytes.all.current": state["active"],
                        "inactive_split_bytes.all.current": state["split"]}
            def release():
                state["whole"] = 0
                if not state["stats"]:
                    state["split"] = 0
            torch.cuda.is_initialized = torch.cuda.memory.is_initialized = lambda: True
            torch.cuda.memory_allocated = lambda *a, **k: state["allocated"]
            torch.cuda.memory_reserved = lambda *a, **k: reserved()
            torch.cuda.memory_stats = lambda *a, **k: stats()
            torch._C._cuda_emptyCache = release
            torch.cuda.empty_cache()          # the allocator already gave its free segments back
            state["whole"] = 4 * MiB          # the failed step's tensors, dropped: a free segment
            torch.cuda.empty_cache()
            state["stats"] = False
            torch.cuda.empty_cache()
        """)
        r = self.job.run(fake)
        self.assertEqual(r.returncode, 0, r.stderr)
        mib = 1 << 20
        events = [e["fields"] for e in self.job.read_events() if e["kind"] == "empty_cache"]
        self.assertEqual(events, [
            {"reserved_before": 5 * mib, "reserved_after": 5 * mib, "allocated_before": 3 * mib, "freeable_before": 0},
            {"reserved_before": 9 * mib, "reserved_after": 5 * mib, "allocated_before": 3 * mib, "freeable_before": 4 * mib},
            {"reserved_before": 5 * mib, "reserved_after": 3 * mib, "allocated_before": 3 * mib, "freeable_before": 2 * mib},
        ])

    def test_flushes_the_cache_as_a_faulted_step_begins(self):
        # No GPU here: stand in for CUDA's cache so the test sees when the probe empties it, and that it
        # does so between steps, once per listed step, without an empty_cache event (the code did not call it).
        spy = textwrap.dedent("""
            import torch
            flushed = []
            torch.cuda.is_initialized = lambda: True
            torch.cuda.synchronize = lambda *a, **k: None
            torch._C._cuda_emptyCache = lambda: flushed.append(steps_done[0])
            steps_done = [0]
            model = torch.nn.Linear(4, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(6):
                opt.zero_grad()
                model(torch.randn(3, 4)).sum().backward()
                opt.step()
                steps_done[0] += 1
            print(flushed)
        """)
        r = self.job.run(spy, extra_env={"OOMH_FLUSH_AT_STEPS": "1,3,5,junk"})
        self.assertEqual(r.returncode, 0, r.stderr)
        # Step 1 begins at the first forward; steps 3 and 5 begin as steps 2 and 4 finish, inside their
        # opt.step() (the optimizer hook), before the loop counts them: 1 and 3 loop iterations were done.
        self.assertEqual(r.stdout.strip(), "[0, 1, 3]")
        self.assertFalse([e for e in self.job.read_events() if e["kind"] == "empty_cache"])

    def test_explicit_api(self):
        code = textwrap.dedent("""
            import torch
            from oomharness import probe
            assert probe.active()
            probe.samples(7)
            probe.step(5, batch_size=3, loss=1.5)
            probe.phase("eval")
            probe.oom(caught=True, message="CUDA out of memory. Tried to allocate 2.00 GiB")
            probe.oom(caught=False)
            probe.step(6)
            probe.memory(allocated=10, reserved=20)
            try:
                probe.phase("lunch")
            except ValueError:
                print("bad phase refused")
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("bad phase refused", r.stdout)
        self.check_lines()
        events = [(e["kind"], e["fields"]) for e in self.job.read_events() if e["kind"] not in ("probe_start", "probe_exit")]
        self.assertEqual(events[0], ("samples", {"count": 7}))
        self.assertEqual(events[1], ("step", {"step": 5, "batch_size": 3, "batch_from": "code", "loss": 1.5}))
        self.assertEqual(events[2][0], "oom")
        self.assertEqual(events[2][1]["caught"], True)
        self.assertEqual(events[2][1]["step"], 6)
        self.assertEqual(events[2][1]["phase"], "eval")
        self.assertEqual(events[3][0], "oom")
        self.assertEqual(events[3][1]["caught"], False)
        self.assertEqual(events[4], ("oom_caught", {"step": 6}), "the step completed after the OOM")
        self.assertEqual(events[5][0], "step")
        self.assertEqual(events[6], ("memory", {"allocated": 10, "reserved": 20}))
        block = self.job.block()
        self.assertEqual((block["ooms_seen"], block["ooms_caught"], block["step"], block["phase"]), (2, 2, 7, "data"))

    def test_explicit_steps_switch_automatic_counting_off(self):
        code = textwrap.dedent("""
            import torch
            from oomharness import probe
            probe.manual_steps()
            model = torch.nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for i in range(3):
                model(torch.ones(4, 2)).sum().backward(); opt.step()
                probe.step(10 + i)
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([e["fields"]["step"] for e in self.job.read_events() if e["kind"] == "step"], [10, 11, 12])

    def test_step_base_0_numbers_steps_as_a_range_loop_does(self):
        # Note [Step convention]: the probe's own count, the block's step in progress, a checkpoint's step
        # and the recovery helper's count are all in the job's numbering (OOMH_STEP_BASE).
        code = textwrap.dedent("""
            import torch
            from oomharness import probe
            model = torch.nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for i in range(3):
                model(torch.ones(4, 2)).sum().backward(); opt.step(); opt.zero_grad()
            torch.save({"step": 2, "w": model.weight}, "ck.pt")
            print(probe.numbered(1), probe.numbered(3))
        """)
        r = self.job.run(code, extra_env={"OOMH_STEP_BASE": "0"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["0", "2"])
        events = self.job.read_events()
        self.assertEqual([e["fields"]["step"] for e in events if e["kind"] == "step"], [0, 1, 2])
        self.assertEqual([e["fields"]["step"] for e in events if e["kind"] == "checkpoint_save"], [2])
        self.assertEqual(self.job.block()["step"], 3, "the step in progress after the code's step 2")
        # Loading the code's step 2 means 3 steps done: the next is its step 3.
        r = self.job.run(textwrap.dedent("""
            import torch
            from oomharness import probe
            model = torch.nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.ones(4, 2)).sum().backward(); opt.step()
            probe.checkpoint_loaded("ck.pt", 2)
            model(torch.ones(4, 2)).sum().backward(); opt.step()
        """), extra_env={"OOMH_STEP_BASE": "0"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([e["fields"]["step"] for e in self.job.read_events() if e["kind"] == "step"][-1], 3)

    def test_a_first_step_0_in_a_job_counting_from_1_is_warned_about(self):
        code = textwrap.dedent("""
            from oomharness import probe
            probe.step(0); probe.step(1)
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        warnings = [e["fields"]["message"] for e in self.job.read_events() if e["kind"] == "warning"]
        self.assertEqual(len(warnings), 1, warnings)
        self.assertIn("step_base: 0", warnings[0])
        r = self.job.run(code, extra_env={"OOMH_STEP_BASE": "0"})  # appends to the same log
        self.assertEqual([e["kind"] for e in self.job.read_events()].count("warning"), 1, "none the second time")

    def test_uncaught_oom_ends_the_process_as_uncaught(self):
        code = textwrap.dedent("""
            import torch
            from oomharness import recover
            model = torch.nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.ones(4, 2)).sum().backward(); opt.step()
            raise recover.oom_error("CUDA out of memory. Tried to allocate 20.00 GiB")
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 1)
        self.assertIn("Tried to allocate 20.00 GiB", r.stderr, "the traceback is still printed")
        events = self.job.read_events()
        ooms = [e["fields"] for e in events if e["kind"] == "oom"]
        self.assertEqual(len(ooms), 1)
        self.assertEqual(ooms[0]["step"], 2)
        self.assertNotIn("caught", ooms[0])
        self.assertNotIn("oom_caught", [e["kind"] for e in events])
        self.assertEqual(events[-1]["kind"], "probe_exit")
        self.assertEqual(events[-1]["fields"]["reason"], "uncaught out-of-memory error")

    def test_an_unrelated_error_that_mentions_memory_is_no_oom(self):
        # Issue 26, Note [Which errors are OOMs]: a job that dies of an error whose text says "out of memory"
        # but is no allocation failure of the device records no `oom`; CUDA's and its libraries' do.
        code = textwrap.dedent("""
            import torch
            from oomharness import probe
            for text in ("CUDA error: out of memory", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)",
                         "NCCL error: unhandled cuda error, NCCL version 2.21.5 Cuda failure 'out of memory'"):
                assert probe.is_oom(RuntimeError(text)), text
            for text in ("DataLoader worker (pid 4242) ran out of memory reading shard 7", "host out of memory"):
                assert not probe.is_oom(RuntimeError(text)), text
            model = torch.nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.ones(4, 2)).sum().backward(); opt.step()
            raise RuntimeError("DataLoader worker (pid 4242) ran out of memory reading shard 7")
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 1)
        self.assertIn("ran out of memory reading shard 7", r.stderr)
        self.assertNotIn("AssertionError", r.stderr)
        self.assertNotIn("oom", [e["kind"] for e in self.job.read_events()])

    def test_each_oom_says_its_kind_and_the_type_it_reached_the_code_as(self):
        # Note [Which errors are OOMs] (oom_kinds.h), issue 27: a cuBLAS handle refused in forward reaches the
        # code as a RuntimeError; the allocator's OOM (its observer) as OutOfMemoryError.
        code = textwrap.dedent("""
            import torch
            from oomharness import probe
            class Model(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lin = torch.nn.Linear(2, 2)
                    self.fail = True
                def forward(self, x):
                    if self.fail:
                        self.fail = False
                        raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
                    return self.lin(x)
            model = Model()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            try:
                model(torch.ones(4, 2))
            except RuntimeError:
                pass
            model(torch.ones(2, 2)).sum().backward(); opt.step()
            probe.get().ooms.observed(0, 4096, 0, 0)
            model(torch.ones(1, 2)).sum().backward(); opt.step()
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        ooms = [e["fields"] for e in self.job.read_events() if e["kind"] == "oom"]
        self.assertEqual([(o.get("oom_kind"), o.get("exception"), o.get("batch_size"), o.get("batch_from")) for o in ooms],
                         [("cublas", "RuntimeError", 4, "inputs"), ("allocator", "OutOfMemoryError", 2, "inputs")])

    def test_oom_after_oom_means_the_first_was_caught(self):
        # Accelerate's retry loop meets several OOMs before a step completes: each one after the first says the
        # code went on, so the earlier one was caught (its oom_caught comes before the next oom).
        code = textwrap.dedent("""
            import torch
            from oomharness import probe
            model = torch.nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            probe.get().ooms.observed(0, 4096, 0, 0)
            probe.get().ooms.observed(0, 2048, 0, 0)
            model(torch.ones(2, 2)).sum().backward(); opt.step()
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        kinds = [e["kind"] for e in self.job.read_events() if e["kind"] in ("oom", "oom_caught", "step")]
        self.assertEqual(kinds, ["oom", "oom_caught", "oom", "oom_caught", "step"])

    def test_allocator_observer_reports_once_and_learns_it_was_caught(self):
        # The allocator's observer (CUDA only) is driven by hand: what it reports, then the exception the
        # code catches, must make one `oom` and one `oom_caught`.
        code = textwrap.dedent("""
            import torch
            from oomharness import probe, recover
            model = torch.nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            probe.get().ooms.observed(0, 1 << 30, 0, 1 << 20)
            try:
                raise recover.oom_error("CUDA out of memory")
            except recover.oom_error_types() as e:
                probe.oom(caught=True, exc=e)
            model(torch.ones(4, 2)).sum().backward(); opt.step()
            probe.get().ooms.observed(0, 4096, 0, 0)
            model(torch.ones(2, 2)).sum().backward(); opt.step()
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        events = [(e["kind"], e["fields"]) for e in self.job.read_events()]
        kinds = [k for k, _ in events]
        self.assertEqual(kinds.count("oom"), 2)
        self.assertEqual(kinds.count("oom_caught"), 2)
        first = [f for k, f in events if k == "oom"][0]
        self.assertEqual((first["device"], first["size"]), (0, 1 << 30))
        block = self.job.block()
        self.assertEqual((block["ooms_seen"], block["ooms_caught"]), (2, 2))

    def test_an_oom_in_backward_is_seen_without_the_observer(self):
        code = textwrap.dedent("""
            import torch
            from oomharness import recover
            class Boom(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return x * 2
                @staticmethod
                def backward(ctx, g):
                    raise recover.oom_error("CUDA out of memory in backward")
            model = torch.nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            try:
                Boom.apply(model(torch.ones(3, 2))).sum().backward()
            except recover.oom_error_types():
                pass
            opt.zero_grad()
            model(torch.ones(3, 2)).sum().backward(); opt.step()
        """)
        r = self.job.run(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        events = [(e["kind"], e["fields"]) for e in self.job.read_events()]
        oom = [f for k, f in events if k == "oom"]
        self.assertEqual(len(oom), 1, events)
        self.assertEqual(oom[0]["phase"], "backward")
        self.assertEqual(oom[0]["batch_size"], 3)
        self.assertIn(("oom_caught", {"step": 1}), events)
        self.assertEqual([f["count"] for k, f in events if k == "samples"], [3], "the failed attempt's samples do not count")

    def test_failures_inside_the_probe_never_reach_the_job(self):
        # An event log that cannot be opened and a control block that is not one: the job runs as usual.
        r = self.job.run(LOOP, extra_env={"OOMH_EVENTS": "/nonexistent/dir/events.jsonl", "OOMH_CONTROL": "/no-such-block"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        with open(self.job.shm, "r+b") as f:
            f.write(b"XXXX")
        r = self.job.run(LOOP)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len([k for k in self.job.kinds() if k == "step"]), 3, "events still flow without a block")


if __name__ == "__main__":
    unittest.main()
