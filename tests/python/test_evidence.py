"""The probe's evidence (python/oomharness/probe/evidence.py, issue 26): a batch's digest is the sum of its samples'
(pieces add up, other samples do not), the batch dimension comes from evidence, and a checkpoint's digest is
its content, whatever path or stream carried it."""
import copy
import io
import os
import shutil
import tempfile
import unittest

import torch

from oomharness.probe import digests as D, evidence as E


class BatchDigest(unittest.TestCase):
    def test_pieces_add_up_to_the_batch_and_other_samples_do_not(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(32, 3, 8, generator=g)
        count, whole, per_sample = D.batch_hash(torch, x, 0)
        self.assertEqual((count, per_sample), (32, True))
        halves = [D.batch_hash(torch, p, 0)[1] for p in x.split(16)]
        self.assertEqual((halves[0] + halves[1]) & D.MASK, whole)
        self.assertEqual(D.batch_hash(torch, x[torch.randperm(32, generator=g)], 0)[1], whole, "order does not matter")
        other = torch.randn(32, 3, 8, generator=g)
        self.assertNotEqual(D.batch_hash(torch, other, 0)[1], whole)
        self.assertNotEqual(D.batch_hash(torch, x[:16], 0)[1], whole)

    def test_sequence_first_batches_add_up_along_dimension_1(self):
        tokens = torch.randint(0, 1000, (20, 32), generator=torch.Generator().manual_seed(1))
        whole = D.batch_hash(torch, tokens, 1)
        a, b = (D.batch_hash(torch, p, 1) for p in tokens.split(16, dim=1))
        self.assertEqual((a[0] + b[0], (a[1] + b[1]) & D.MASK), whole[:2])

    def test_the_batch_dimension_comes_from_evidence(self):
        t = torch.zeros(12, 32, 16)
        self.assertEqual(E.batch_dim(t, 32, False), (1, "loader"))
        self.assertEqual(E.batch_dim(t, None, True), (1, "sequence_first"))
        self.assertEqual(E.batch_dim(t, None, False), (0, "first"))
        lstm = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LSTM(4, 4))
        self.assertTrue(E.sequence_first(torch, lstm))
        self.assertFalse(E.sequence_first(torch, torch.nn.LSTM(4, 4, batch_first=True)))
        # Transformers: nn.Transformer and its layers take (seq, batch, ...) unless batch_first.
        for batch_first in (False, True):
            layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=batch_first)
            model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.TransformerEncoder(layer, 1))
            self.assertEqual(E.sequence_first(torch, model), not batch_first)
            whole = torch.nn.Transformer(8, 2, 1, 1, 16, batch_first=batch_first)
            self.assertEqual(E.sequence_first(torch, whole), not batch_first)
        # A bare attention module is often fed transposed inside a batch-first model: no evidence.
        self.assertFalse(E.sequence_first(torch, torch.nn.MultiheadAttention(8, 2)))


class SampleContent(unittest.TestCase):
    """Issue 42: a sample is all its values, whatever container the batch comes in."""

    def padded(self, seed, count=8):
        g = torch.Generator().manual_seed(seed)
        ids = torch.zeros(count, 128, dtype=torch.long)
        ids[:, 0] = 101
        for i in range(count):
            n = int(torch.randint(1, 4, (1,), generator=g))
            ids[i, 1:1 + n] = torch.randint(1000, 2000, (n,), generator=g)
            ids[i, 1 + n] = 102
        return ids

    def test_padded_batches_differ(self):
        a, b = self.padded(0), self.padded(1)
        self.assertNotEqual(D.batch_hash(torch, a, 0)[1], D.batch_hash(torch, b, 0)[1])
        count, digest, per_sample, hashes, whole = D.sample_hashes(torch, a, 0)
        self.assertTrue(per_sample and whole)
        self.assertEqual(D.distinct(torch, [hashes]), 8)
        # One token changed at the end of the padding is another sample.
        c = a.clone()
        c[3, 127] = 5
        self.assertNotEqual(D.batch_hash(torch, c, 0)[1], digest)

    def test_a_redo_of_the_same_half_twice_is_not_the_batch(self):
        a = self.padded(2)
        whole = D.sample_hashes(torch, a, 0)
        first = D.sample_hashes(torch, a[:4], 0)
        self.assertNotEqual((first[1] * 2) & D.MASK, whole[1])
        self.assertEqual(D.distinct(torch, [first[3], first[3]]), 4)
        second = D.sample_hashes(torch, a[4:], 0)
        self.assertEqual(D.distinct(torch, [first[3], second[3]]), 8)

    def test_a_sample_over_the_budget_is_read_in_part_and_says_so(self):
        x = torch.randn(32, 3, 40, 48)  # 5760 values a sample: every 6th is read
        count, digest, per_sample, hashes, whole = D.sample_hashes(torch, x, 0)
        self.assertEqual((count, per_sample, whole), (32, True, False))
        self.assertEqual(D.distinct(torch, [hashes]), 32)
        # What is read depends on the sample, never on the batch's size: halves add up to the whole.
        a, b = (D.sample_hashes(torch, p, 0)[1] for p in x.split(16))
        self.assertEqual((a + b) & D.MASK, digest)
        self.assertTrue(D.sample_hashes(torch, x[:, :, :4, :4], 0)[4], "48 values a sample: read whole")

    def test_containers_are_walked(self):
        import collections
        import dataclasses

        @dataclasses.dataclass
        class Batch:
            pixels: torch.Tensor
            labels: torch.Tensor
            name: str = "train"

        class Encoding(collections.abc.Mapping):  # a BatchEncoding: a Mapping, not a dict
            def __init__(self, **d):
                self.d = d

            def __getitem__(self, k):
                return self.d[k]

            def __iter__(self):
                return iter(self.d)

            def __len__(self):
                return len(self.d)
        Pair = collections.namedtuple("Pair", "x y")
        x, y = torch.zeros(4, 3), torch.zeros(4)
        for args, kwargs in ((Batch(x, y),), None), (({"inner": [Pair(x, y)]},), None), ((), {"enc": Encoding(x=x, y=y)}):
            tensors, items = E.input_leaves(torch, args, kwargs)
            self.assertEqual([t.shape for t in tensors], [x.shape, y.shape])
            self.assertEqual(items, [])
        self.assertTrue(E.has_tensor(torch, (Batch(x, y),)))
        # Malformed: containers with no tensor, and a cycle, are walked to nothing, not forever.
        loop = []
        loop.append(loop)
        self.assertEqual(E.input_leaves(torch, ({"a": "text", "b": [1, 2]}, loop)), ([], []))

    def test_a_list_of_per_sample_dicts_is_a_batch_of_its_items(self):
        g = torch.Generator().manual_seed(3)
        items = [{"image": torch.rand(3, 5 + i, 6, generator=g), "label": i % 2} for i in range(4)]
        tensors, lists = E.input_leaves(torch, (items,))
        self.assertEqual((tensors, len(lists), len(lists[0])), ([], 1, 4))
        hashes = [D.item_hash(torch, item) for item in items]
        self.assertEqual(len(set(hashes)), 4)
        other = dict(items[0], label=1)
        self.assertNotEqual(D.item_hash(torch, other), hashes[0], "its plain values are part of it")
        self.assertIsNone(D.item_hash(torch, {"label": 1}), "no tensor: no sample hash")


class ResumeStep(unittest.TestCase):
    """Issue 42, class 9: the step a resume starts at, from the counter under its usual names or from the
    optimizer's own count."""

    def test_counters_under_other_names(self):
        from oomharness.probe.checkpoints import checkpoint_step
        self.assertEqual(checkpoint_step({"model": {}, "iter_num": 6}), 6)
        self.assertEqual(checkpoint_step({"global_steps": torch.tensor(8)}), 8)
        self.assertEqual(checkpoint_step({"trainer": {"num_updates": 3}}), 3)
        # Malformed or absent: no step, never a wrong one.
        self.assertIsNone(checkpoint_step({"epoch": 2, "step": "six", "iter": True}))
        self.assertIsNone(checkpoint_step({"step": -4}))
        self.assertIsNone(checkpoint_step([1, 2]))

    def test_what_the_earlier_attempts_saved(self):
        # Note [A resume numbered by what it loaded] (runner/src/exec/launch.h): the runner's OOMH_SAVED_STEPS,
        # read once; anything but 16 lower-case hex digits and a count is skipped, never misread.
        from oomharness._job import JobSettings
        text = "00000000000000a2:2,bad,00000000000000A3:3,0000000000000004:x,,00000000000000a6:6:1,00000000000000a8:8"
        self.assertEqual(JobSettings({"OOMH_SAVED_STEPS": text}).saved_steps,
                         {"00000000000000a2": 2, "00000000000000a8": 8})
        self.assertEqual(JobSettings({}).saved_steps, {})

    def test_the_optimizers_own_count(self):
        from oomharness.probe.checkpoints import optimizer_steps
        model = torch.nn.Linear(4, 2)
        adam = torch.optim.Adam(model.parameters())
        self.assertIsNone(optimizer_steps(adam), "no step taken: no state")
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            adam.step()
        fresh = torch.optim.Adam(model.parameters())
        fresh.load_state_dict(adam.state_dict())
        self.assertEqual(optimizer_steps(fresh), 3)
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        sgd.step()
        self.assertIsNone(optimizer_steps(sgd), "a stateless optimizer keeps no count")


class CheckpointDigest(unittest.TestCase):
    def test_a_whole_module_saved_is_its_state(self):
        # Issue 42, class 6: torch.save(model) reaches the module's tensors.
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        digest, prints, tensors, paths = E.state_digest(torch, model)
        self.assertEqual(tensors, 4)
        with torch.no_grad():
            model[0].weight.add_(1.0)
        self.assertNotEqual(E.state_digest(torch, model)[0], digest)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        loaded = torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
        self.assertEqual(E.state_digest(torch, loaded)[0], E.state_digest(torch, model)[0])
        got = E.model_state(torch, loaded, [E.state_digest(torch, model)[:2] + (E.state_digest(torch, model)[3],)])
        self.assertEqual((got["unmatched"], got["unseen"], got["from"][0]["tensors"]), (0, 0, 4))


    def test_a_state_made_wider_again_is_the_same_state(self):
        # Note [A checkpoint is its content]: Ultralytics saves its EMA model as deepcopy(model).half() and resumes
        # with .float(): the same values, exactly. Matched by dtype, none of its tensors matched (yolo-resume, a
        # false red). A state rounded on the way (bfloat16) is another state.
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)).half()
        saved = E.state_digest(torch, {"ema": model})
        resumed = copy.deepcopy(model).float()
        got = E.model_state(torch, resumed, [saved[:2] + (saved[3],)])
        self.assertEqual((got["unmatched"], got["unseen"], got["from"][0]["tensors"]), (0, 0, 4))
        full = torch.nn.Linear(8, 8)
        kept = E.state_digest(torch, full.state_dict())
        rounded = copy.deepcopy(full).to(torch.bfloat16)
        self.assertEqual(E.model_state(torch, rounded, [kept[:2] + (kept[3],)])["unmatched"], 2)
        # the kind of values still counts: an integer tensor is not a float one with the same values
        self.assertNotEqual(D.tensor_hash(torch, torch.arange(4)), D.tensor_hash(torch, torch.arange(4).float()))
        self.assertEqual(D.tensor_hash(torch, torch.arange(4).half()), D.tensor_hash(torch, torch.arange(4).double()))

    def test_the_digest_survives_renames_copies_and_streams(self):
        model = torch.nn.Linear(8, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 6}
        saved, prints, tensors, _ = E.state_digest(torch, state)
        self.assertGreaterEqual(tensors, 4)
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = os.path.join(tmp, "last.pt.tmp")
            torch.save(state, tmp_path)
            os.replace(tmp_path, os.path.join(tmp, "last.pt"))
            shutil.copyfile(os.path.join(tmp, "last.pt"), os.path.join(tmp, "best.pt"))
            buffer = io.BytesIO()
            torch.save(state, buffer)
            for loaded in (torch.load(os.path.join(tmp, "last.pt")), torch.load(os.path.join(tmp, "best.pt")),
                           torch.load(io.BytesIO(buffer.getvalue()))):
                self.assertEqual(E.state_digest(torch, loaded)[0], saved)
        self.assertNotEqual(E.state_digest(torch, dict(state, step=4))[0], saved, "another step is another state")

    def test_model_state_says_which_loaded_state_the_model_holds(self):
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 4)
        init = E.state_digest(torch, model.state_dict())
        with torch.no_grad():
            model.weight.add_(1.0)
        trained = E.state_digest(torch, {"model": model.state_dict()})
        loaded = [init[:2] + (init[3],), trained[:2] + (trained[3],)]
        got = E.model_state(torch, model, loaded)
        self.assertEqual(got["unmatched"], 0)
        self.assertIn(D.hex64(trained[0]), got["from"][0]["digests"])
        fresh = torch.nn.Linear(8, 4)
        self.assertEqual(E.model_state(torch, fresh, loaded)["unmatched"], 2, "loaded under its names, other values")
        # Weights that came by other means (safetensors) beside an optimizer.pt: not judged.
        opt = torch.optim.Adam(fresh.parameters())
        fresh(torch.randn(2, 8)).sum().backward()
        opt.step()
        optimizer_only = E.state_digest(torch, opt.state_dict())
        got = E.model_state(torch, fresh, [optimizer_only[:2] + (optimizer_only[3],)])
        self.assertEqual((got["unmatched"], got["unseen"]), (0, 2))


if __name__ == "__main__":
    unittest.main()
