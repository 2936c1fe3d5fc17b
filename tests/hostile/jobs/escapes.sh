#!/bin/sh
# A job whose output tries to take over the terminal (issue 28): retitle the window, clear the screen,
# hide a line, reverse text with a bidirectional override; then it fails, so the summary quotes it.
printf 'title\033]0;pwned\007 clear\033[2J\033[H hidden\033[8m secret\033[0m bidi\342\200\256txet c1\302\233 done\n'
exit 3
