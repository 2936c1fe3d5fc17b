#!/bin/sh
# A job that plants symbolic links in the run's output folder (issue 28), pointing into $HOSTILE_VICTIM:
# where the runner will make the next job's folder, this job's work folder and log on the next run, the
# reports and the job stream. Nothing in the victim folder may change.
job_dir=$(dirname "$OOMH_EVENTS")
jobs_dir=$(dirname "$job_dir")
out=$(dirname "$jobs_dir")
v="$HOSTILE_VICTIM"
# The next job's whole folder, and this job's own files for the next run.
ln -sfn "$v/next" "$jobs_dir/hostile__next"
rm -rf "$job_dir/work" && ln -s "$v/work" "$job_dir/work"
# The log the runner writes through its descriptor now, and creates again on the next run.
ln -sf "$v/log.txt" "$job_dir/attempt-0.log"
# The reports and the stream in the output folder: a link to a file, a link to nothing yet (the runner must
# not create it), a FIFO (the runner must not block on it).
rm -f "$out/results.json" && ln -s "$v/results.json" "$out/results.json"
rm -f "$out/jobs.jsonl" && ln -s "$v/jobs.jsonl.new" "$out/jobs.jsonl"
rm -f "$out/report.html" && mkfifo "$out/report.html"
# Relative links, to a folder and to a file, where the next job's work folder and log will be.
ln -sfn "../../../victim/work" "$jobs_dir/hostile__job/reference-work"
echo "planted"
exit 0
