"""`oomharness` as installed by the wheel (pyproject.toml's console script), and `python -m oomharness`.

Note [The command of the wheel]
The command is the C++ program the wheel carries in oomharness/_native/bin (CMake's installed layout under
the package: Note [One wheel] in CMakeLists.txt). The console script is this small Python entry point that
execs it, rather than the program itself placed in the environment's bin/ (scikit-build-core's scripts
folder), because the program finds its shim, driver double and Python probe relative to its own folder
(Note [Finding the harness's pieces] in runner/src/app/paths.h): from <site-packages>/oomharness/_native/bin it
finds them as from any prefix, whatever scheme pip installed with (a venv, --user, --target, --prefix),
where a copy in bin/ would have to guess the site-packages folder. The cost is one Python start before the
exec (measured in tests/install/check_wheel.sh). The entry point also tells the command which Python it was
installed for (OOMH_TORCH_PYTHON), so that the demo's PyTorch jobs use that environment's torch even when
it is not the first python3 on PATH.
"""

import os
import sys

from oomharness import harness


def main():
    binary = harness.packaged_binary()
    if binary is None:
        sys.stderr.write(
            "oomharness: this installation of the Python package carries no command (%s is missing): it was "
            "installed from python/ alone. Install the wheel (`pip install .` in a checkout), or use the "
            "installed command (the Debian package, `cmake --install`)\n"
            % os.path.join(harness.NATIVE_DIR, "bin", "oomharness"))
        return harness.EXIT_INTERNAL
    os.environ.setdefault(harness.TORCH_PYTHON_VARIABLE, sys.executable)
    os.execv(binary, ["oomharness"] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
