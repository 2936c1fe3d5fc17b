"""The examples runner's own rules (Note [Examples that run] in run_examples.py): what is an example, what it
must print, and that it can fail. Each case is a small Markdown file; no harness runs here."""
import os
import tempfile
import unittest

import run_examples


def parse(text):
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
        f.write(text)
    try:
        return run_examples.parse(f.name)
    finally:
        os.unlink(f.name)


class FakeScratch:
    """A scratch folder without the checkout's links: the commands here need none."""

    copy_beside = run_examples.Scratch.copy_beside

    def __init__(self, folder):
        self.dir = folder
        self.env = dict(os.environ)


class Parse(unittest.TestCase):
    def test_shell_blocks_are_examples_and_others_are_not(self):
        found = parse("text\n```sh\noomharness validate a.yaml\n```\n```yaml\nversion: 1\n```\n```text\n"
                      "oomharness run SUITE...\n```\n```\nstart  demo::x\n```\n")
        self.assertEqual([(e.line, e.tag) for e in found], [(2, "sh")])

    def test_an_untagged_command_must_be_tagged(self):
        (ex,) = parse("```\noomharness predict -- python train.py\n```\n")
        self.assertIn("tag it `sh`", ex.problem)

    def test_continuations_and_the_output_a_command_must_print(self):
        (ex,) = parse("```sh\n# what it does\noomharness budget --simulate \\\n  -- trainer --steps 3\n"
                      "# largest batch under 960.00 KiB: 6\n\n# a note before the next\noomharness explain r.json\n```\n")
        self.assertEqual(ex.commands(), [("oomharness budget --simulate \\\n  -- trainer --steps 3",
                                          ["largest batch under 960.00 KiB: 6"]),
                                         ("oomharness explain r.json", [])])

    def test_an_unclosed_fence_is_an_error(self):
        (ex,) = parse("```sh\noomharness validate a.yaml\n``` and then prose\n")
        self.assertIn("never closed", ex.problem)

    def test_directives(self):
        (ex,) = parse("<!-- example: exit 1; before: cp a b -->\n```sh\nfalse\n```\n")
        self.assertEqual(ex.directives, [("exit", "1"), ("before", "cp a b")])
        (ex,) = parse("<!-- example: not run: installs packages; it would: not matter -->\n```sh\napt-get x\n```\n")
        self.assertEqual(ex.directive("not run"), "installs packages; it would: not matter")
        (ex,) = parse("<!-- example: pytest test_x.py with examples/python/train.py -->\n```python\nimport os\n```\n")
        self.assertEqual(run_examples.split_with(ex.directive("pytest")), ("test_x.py", ["examples/python/train.py"]))
        (ex,) = parse("<!-- example: exits 1 -->\n```sh\nfalse\n```\n")
        self.assertIn("unknown example directive 'exits 1'", ex.problem)

    def test_simulate_is_added_where_no_gpu_is(self):
        self.assertEqual(run_examples.simulated("build/runner/oomharness exec --cap 1GiB -- python3 t.py"),
                         "build/runner/oomharness exec --simulate --cap 1GiB -- python3 t.py")
        self.assertEqual(run_examples.simulated("oomharness run s.yaml --jobs 4"), "oomharness run --simulate s.yaml --jobs 4")
        self.assertEqual(run_examples.simulated("oomharness sweep --simulate --step 2"), "oomharness sweep --simulate --step 2")
        self.assertEqual(run_examples.simulated("oomharness report r.json"), "oomharness report r.json")


class Check(unittest.TestCase):
    """An example that does not do what its text says fails."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="oomh-examples-test-")
        self.log = open(os.path.join(self.dir, "log"), "w")

    def tearDown(self):
        self.log.close()

    def check(self, text):
        (ex,) = parse(text)
        return run_examples.check(ex, FakeScratch(self.dir), False, self.log)

    def test_exit_codes(self):
        self.assertIsNone(self.check("```sh\ntrue\n```\n"))
        self.assertIn("exited 1, not 0", self.check("```sh\nfalse\n```\n"))
        self.assertIsNone(self.check("<!-- example: exit 1 -->\n```sh\nfalse\n```\n"))
        self.assertIn("exited 0, not 1", self.check("<!-- example: exit 1 -->\n```sh\ntrue\n```\n"))
        # Only the last command may fail as the directive says; the ones before it must succeed.
        self.assertIn("`false` exited 1", self.check("<!-- example: exit 1 -->\n```sh\nfalse\nfalse\n```\n"))

    def test_output_it_must_print(self):
        self.assertIsNone(self.check("```sh\necho 'largest batch: 6 (7 runs)'\n# largest batch: 6\n```\n"))
        self.assertIn("did not print `largest batch: 7`",
                      self.check("```sh\necho 'largest batch: 6 (7 runs)'\n# largest batch: 7\n```\n"))

    def test_a_file_for_the_examples_after_it(self):
        self.assertIsNone(self.check("<!-- example: file s.yaml -->\n```yaml\nversion: 1\n```\n"))
        self.assertEqual(open(os.path.join(self.dir, "s.yaml")).read(), "version: 1\n")
        self.assertIsNone(self.check("```sh\ngrep -q 'version: 1' s.yaml\n```\n"))
        self.assertIn("its `before:` command exited 1",
                      self.check("<!-- example: before: test -e nothing -->\n```sh\ntrue\n```\n"))


class TheDocuments(unittest.TestCase):
    def test_every_example_of_the_documents_is_well_formed(self):
        for path in run_examples.markdown_files():
            for ex in run_examples.parse(path):
                self.assertIsNone(ex.problem, ex.where)
                if ex.tag in run_examples.SHELL_TAGS and ex.directive("not run") is None:
                    self.assertTrue(ex.commands(), ex.where)


if __name__ == "__main__":
    unittest.main()
