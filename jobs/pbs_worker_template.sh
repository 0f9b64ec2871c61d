# The worker jobs of an elastic cluster on PBS Pro (jobs/pbs_elastic.sh, --worker-job): their #PBS lines
# and the shell lines run before each one's node starts. mpiray adds the name, the chunk
# (select=1:ncpus=N), the output file and the command that joins the cluster. The setup line enters the
# same environment as the head job's ENV_SETUP (the checkout's venv: docs/install.md, "Polaris").
#PBS -A myproject
#PBS -q workq
#PBS -l walltime=02:00:00
# Polaris: -q one of its queues (workq is OpenPBS's default, not Polaris's), and qsub refuses a job
# without -l filesystems=. With MPIRAY_SITE=polaris (--site polaris) mpiray
# adds "#PBS -l filesystems=home:eagle" to each worker job by itself; a filesystems= line of your own wins:
# #PBS -l filesystems=home:eagle:grand
module use /soft/modulefiles && module load conda && source "$HOME/mpiray/.venv/bin/activate"
