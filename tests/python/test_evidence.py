"""The probe's evidence (python/oomharness/probe/evidence.py, issue 26): a batch's digest is the sum of its samples'
(pieces add up, other samples do not), the batch dimension comes from evidence, and a checkpoint's digest is
its content, whatever path or stream carried it."""
import io
import os
import shutil
import tempfile
import unittest

import torch

from oomharness.probe import evidence as E


class BatchDigest(unittest.TestCase):
    def test_pieces_add_up_to_the_batch_and_other_samples_do_not(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(32, 3, 8, generator=g)
        count, whole, per_sample = E.batch_hash(torch, x, 0)
        self.assertEqual((count, per_sample), (32, True))
        halves = [E.batch_hash(torch, p, 0)[1] for p in x.split(16)]
        self.assertEqual((halves[0] + halves[1]) & E.MASK, whole)
        self.assertEqual(E.batch_hash(torch, x[torch.randperm(32, generator=g)], 0)[1], whole, "order does not matter")
        other = torch.randn(32, 3, 8, generator=g)
        self.assertNotEqual(E.batch_hash(torch, other, 0)[1], whole)
        self.assertNotEqual(E.batch_hash(torch, x[:16], 0)[1], whole)

    def test_sequence_first_batches_add_up_along_dimension_1(self):
        tokens = torch.randint(0, 1000, (20, 32), generator=torch.Generator().manual_seed(1))
        whole = E.batch_hash(torch, tokens, 1)
        a, b = (E.batch_hash(torch, p, 1) for p in tokens.split(16, dim=1))
        self.assertEqual((a[0] + b[0], (a[1] + b[1]) & E.MASK), whole[:2])

    def test_the_batch_dimension_comes_from_evidence(self):
        t = torch.zeros(12, 32, 16)
        self.assertEqual(E.batch_dim(t, 32, False, None), (1, "loader"))
        self.assertEqual(E.batch_dim(t, None, True, None), (1, "rnn"))
        self.assertEqual(E.batch_dim(t, None, False, 1), (1, "change"))
        self.assertEqual(E.batch_dim(t, None, False, None), (0, "guess"))
        self.assertEqual(E.changed_dim((12, 32, 16), (12, 16, 16)), 1)
        self.assertIsNone(E.changed_dim((12, 32), (10, 16)))
        lstm = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LSTM(4, 4))
        self.assertTrue(E.has_sequence_first_rnn(torch, lstm))
        self.assertFalse(E.has_sequence_first_rnn(torch, torch.nn.LSTM(4, 4, batch_first=True)))


class CheckpointDigest(unittest.TestCase):
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
        self.assertIn(E.hex64(trained[0]), got["from"][0]["digests"])
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
