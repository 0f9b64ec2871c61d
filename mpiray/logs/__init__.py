"""What a job leaves to read: each rank's events (events.py), the files of a job's log dir and how they
are opened (files.py), the driver's output copied into one (tee.py), rank 0's live start-up line
(progress.py), and `mpiray logs`, which reads them all back (report/)."""
