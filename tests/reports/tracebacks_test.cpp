// Note [The user's traceback] in reports/include/oomharness/reports/tracebacks.h.

#include <gtest/gtest.h>

#include "oomharness/reports/tracebacks.h"

namespace oomh {
namespace {

const char* kVirtualOom =
    "step 3 loss 0.5\n"
    "Traceback (most recent call last):\n"
    "  File \"/home/me/proj/train.py\", line 40, in <module>\n"
    "    loss = model(x).sum()\n"
    "           ^^^^^^^^\n"
    "  File \"/venv/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1775, in _wrapped_call_impl\n"
    "    return self._call_impl(*args, **kwargs)\n"
    "  File \"/venv/lib/python3.11/site-packages/oomharness/virtual_device/mode.py\", line 770, in __torch_dispatch__\n"
    "    out = func(*args, **kwargs)\n"
    "          ^^^^^^^^^^^^^^^^^^^^^\n"
    "  File \"/venv/lib/python3.11/site-packages/oomharness/virtual_device/device.py\", line 155, in book\n"
    "    self.allocator.malloc(n)\n"
    "  File \"/venv/lib/python3.11/site-packages/oomharness/virtual_device/allocator.py\", line 230, in malloc\n"
    "    raise torch.OutOfMemoryError(message)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB\n";

TEST(Tracebacks, HarnessFramesFoldIntoOneLineThatSaysSo) {
  const std::string folded = fold_harness_frames(kVirtualOom);
  EXPECT_EQ(folded,
            "step 3 loss 0.5\n"
            "Traceback (most recent call last):\n"
            "  File \"/home/me/proj/train.py\", line 40, in <module>\n"
            "    loss = model(x).sum()\n"
            "           ^^^^^^^^\n"
            "  File \"/venv/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1775, in _wrapped_call_impl\n"
            "    return self._call_impl(*args, **kwargs)\n"
            "  \u2026 3 frames in oomharness's virtual device (folded; the attempt's log has them)\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB\n");
}

TEST(Tracebacks, PartsAreNamedAndUserFramesBetweenThemStay) {
  const std::string text =
      "  File \"/x/oomharness/probe/steps.py\", line 9, in backward\n"
      "    return original(*a)\n"
      "  File \"/x/oomharness/virtual_device/libraries.py\", line 460, in wrapper\n"
      "    return fn(*a)\n"
      "  File \"/me/my_loss.py\", line 3, in hook\n"
      "    raise ValueError('mine')\n"
      "  File \"/x/oomharness/recover.py\", line 12, in halving\n"
      "ValueError: mine\n";
  EXPECT_EQ(fold_harness_frames(text),
            "  \u2026 2 frames in oomharness (probe, virtual device) (folded; the attempt's log has them)\n"
            "  File \"/me/my_loss.py\", line 3, in hook\n"
            "    raise ValueError('mine')\n"
            "  \u2026 1 frame in oomharness's recovery helpers (folded; the attempt's log has them)\n"
            "ValueError: mine\n");
}

TEST(Tracebacks, NothingOfOursIsLeftUnchanged) {
  // A user's own files that merely look alike are not ours: another folder name, another file name.
  const std::string text =
      "  File \"/me/not_oomharness/probe.py\", line 1, in f\n"
      "    x()\n"
      "  File \"/me/oomharness/mymodule.py\", line 2, in g\n"
      "  File \"/me/oomharness/probe/deeper/x.py\", line 2, in g\n"
      "  File \"/me/not_oomharness/probe/steps.py\", line 2, in g\n"
      "  File \"probe.py\", line 3, in h\n"
      "no newline at the end";
  EXPECT_EQ(fold_harness_frames(text), text);
  EXPECT_EQ(fold_harness_frames(""), "");
}

}  // namespace
}  // namespace oomh
