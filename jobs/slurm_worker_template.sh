# The worker jobs of an elastic cluster (jobs/slurm_elastic.sh, --worker-job): their #SBATCH lines, and
# shell lines run before each one's node starts. mpiray adds the job's name, its one task and its CPUs,
# --export=NONE, the output file and the command that joins the cluster. No token here: each worker
# job reads it from your registry (~/.mpiray/clusters, 0600).
#SBATCH --account=myproject
#SBATCH --partition=standard
#SBATCH --time=02:00:00
#SBATCH --qos=normal
source "$HOME/mpiray/.venv/bin/activate"
