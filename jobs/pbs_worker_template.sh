# The worker jobs of an elastic cluster on PBS Pro (jobs/pbs_elastic.sh, --worker-job): their #PBS lines
# and the shell lines run before each one's node starts. mpiray adds the name, the chunk
# (select=1:ncpus=N), the output file and the command that joins the cluster.
#PBS -A myproject
#PBS -q workq
#PBS -l walltime=02:00:00
module use /soft/modulefiles && module load conda && conda activate base
