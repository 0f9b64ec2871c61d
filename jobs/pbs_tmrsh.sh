#!/bin/sh
# pbs_tmrsh HOST COMMAND... through a shell, for MPICH's (hydra's) rsh launcher and Open MPI's rsh agent
# under PBS without PALS:
#   mpiexec -launcher rsh -launcher-exec "$MPIRAY_DIR/jobs/pbs_tmrsh.sh" -f "$PBS_NODEFILE" ...
#   mpirun --mca plm_rsh_agent "$MPIRAY_DIR/jobs/pbs_tmrsh.sh" ...
# pbs_tmrsh starts COMMAND on HOST through PBS's TM interface, so the ranks belong to the job: PBS
# accounts for them and ends them with it (qdel, the walltime). But it runs no shell, and both launchers
# write their remote command for one (hydra quotes the proxy's path, Open MPI sets PATH first): without
# this wrapper no rank starts.
host=$1
shift
exec pbs_tmrsh "$host" /bin/sh -c "$*"
