#!/bin/sh
# A nightly job that the same crontab starts on every machine; it runs on one of them at a time.
#
#   HIREDLOCK_MASTERS=redis://10.0.0.1:6379/0,redis://10.0.0.2:6379/0,redis://10.0.0.3:6379/0
#   0 2 * * *  /opt/reports/cron_job.sh /usr/local/bin/report
#
# `hiredlock run` takes the lock (giving up at once when another machine holds it: exit status 75),
# runs the command while renewing the lock every ttl/3, and releases it when the command ends. A
# machine that dies holding it leaves the lock for at most the ttl (60 s). Exit status 79: the lock
# was lost while the command ran, and the command was terminated.
exec hiredlock run nightly-report --ttl 60 -- "$@"
