// The `oomharness` command. Everything it does lives in the oomh_app library (runner/src/app), which the
// tests link: docs/cli.md.
#include "oomharness/runner/app.h"

int main(int argc, char** argv) { return oomh::app_main(argc, argv); }
