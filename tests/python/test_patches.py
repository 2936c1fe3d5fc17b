"""The patch table (Note [The patch table] in python/oomharness/_patches.py): every attribute the virtual device
and the probe replace is a row of it, the layers of a site stack in the table's order whatever the order of
installation, and uninstalling leaves torch (and sys) as they were."""
import json
import os
import subprocess
import sys
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.abspath(os.path.join(HERE, "..", "..", "python"))

# Runs in a fresh process: what every site holds before, then after the device and the probe were installed
# and uninstalled.
SCRIPT = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, %r)
    import torch
    import torch.optim
    from oomharness import _job, _patches, probe, virtual_device

    def sites():
        for owner, names, _ in _patches.SITES:
            if owner == "torch.optim.*":
                objs = [m for n, m in sorted(sys.modules.items()) if n == "torch.optim" or n.startswith("torch.optim.")]
            else:
                objs = [_patches.resolve(owner)]
            for obj in objs:
                if obj is None:
                    continue
                for name in names:
                    if hasattr(obj, name):
                        yield owner, obj, name

    def snapshot():
        return {(owner, getattr(obj, "__name__", ""), name): (id(getattr(obj, name)),
                                                             isinstance(obj, type) and name in vars(obj))
                for owner, obj, name in sites()}

    before = snapshot()
    order = os.environ["ORDER"]
    ctx = _job.current()
    ctx.torch = torch
    shape_only = os.environ.get("SHAPE_ONLY") == "1"
    if order == "probe-first":
        probe.install(torch)
        dev = virtual_device.install_with_budget(1 << 30, shape_only=shape_only)
    else:
        dev = virtual_device.install_with_budget(1 << 30, shape_only=shape_only)
        probe.install(torch)
    during = snapshot()
    replaced = sorted("%%s.%%s" %% (o, n) for (o, m, n), v in during.items() if v != before.get((o, m, n)))
    # The layers of torch.load: the probe's outside the device's, whatever the order (the probe records the
    # load, the device books what it read).
    load = torch.load
    layers = []
    while load is not None:
        layers.append(getattr(load, "__module__", "?"))
        load = getattr(load, "__wrapped__", None)
    booked = None
    if not shape_only:  # fake tensors cannot be saved yet (issue 43)
        x = torch.ones(3, device="cuda")
        torch.save({"x": x, "step": 1}, os.environ["CKPT"])
        booked = dev.on_device(torch.load(os.environ["CKPT"], map_location="cuda")["x"])
    try:
        _patches.PatchTable().replace("probe.steps", "torch", "load", lambda original: original)
        refused = False
    except KeyError as e:
        refused = str(e)
    ctx.patches.uninstall()
    after = snapshot()
    changed = sorted("%%s.%%s" %% (o, n) for (o, m, n), v in after.items() if v != before.get((o, m, n)))
    print(json.dumps({"replaced": replaced, "changed_after": changed, "load_layers": layers[:3], "booked": booked,
                      "refused": refused, "left": ctx.patches.installed()}, default=str))
""" % PY)


class PatchTable(unittest.TestCase):
    def run_script(self, order, shape_only=False):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            env = {k: v for k, v in os.environ.items() if not k.startswith("OOMH_")}
            env.update(ORDER=order, CKPT=os.path.join(tmp, "ck.pt"), OOMH_EVENTS=os.path.join(tmp, "events.jsonl"),
                       OOMH_CHECK_EVENTS="1", SHAPE_ONLY="1" if shape_only else "0")
            r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            return json.loads(r.stdout.strip().splitlines()[-1])

    def test_uninstalling_leaves_torch_as_it_was(self):
        for order in ("device-first", "probe-first"):
            got = self.run_script(order)
            self.assertGreater(len(got["replaced"]), 100, "the device and the probe replace torch's functions")
            for expected in ("torch.load", "torch.Tensor.to", "torch.cuda.empty_cache", "torch.autograd.backward",
                             "torch.save", "sys.excepthook", "torch.optim.Optimizer.zero_grad"):
                self.assertIn(expected, got["replaced"], order)
            self.assertEqual(got["changed_after"], [], order + ": every site holds its original object again")
            self.assertEqual(got["left"], [], order)

    def test_layers_stack_in_the_tables_order_whatever_the_order_of_installing(self):
        for order in ("device-first", "probe-first"):
            got = self.run_script(order)
            self.assertEqual(got["load_layers"][:2], ["oomharness.probe.checkpoints", "oomharness.virtual_device.loading"],
                             order + ": the probe's torch.load is outside the device's")
            self.assertTrue(got["booked"], order + ": what torch.load read for the device is booked on it")

    def test_shape_only_mode_uninstalls_too(self):
        got = self.run_script("device-first", shape_only=True)
        self.assertIn("torch.utils.swap_tensors", got["replaced"])
        self.assertEqual(got["changed_after"], [])

    def test_a_replacement_the_table_lacks_is_refused(self):
        got = self.run_script("device-first")
        self.assertIn("lists no replacement of torch.load by probe.steps", got["refused"])


if __name__ == "__main__":
    unittest.main()
