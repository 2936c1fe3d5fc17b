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
# The reports and the stream in the output folder.
for f in results.json report.html jobs.jsonl; do
  rm -f "$out/$f" && ln -s "$v/$f" "$out/$f"
done
echo "planted"
exit 0
