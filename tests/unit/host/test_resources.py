"""Ranks on one host split it: the sum of what they give Ray never exceeds the host."""

import pytest

from mpiray.host.resources import HostView, cgroup_memory_limit, check_object_store, rank_share, visible_gpus

GIB = 2**30


def views(n, cpus=range(2), memory=24 * GIB, shm=12 * GIB, gpus=(), bound=False):
    cpus = list(cpus)
    out = []
    for i in range(n):
        affinity = tuple(cpus[i::n]) if bound else tuple(cpus)
        out.append(HostView("h", affinity, memory, shm, tuple(gpus)))
    return out


@pytest.mark.parametrize("ranks, host_cpus", [(1, 2), (2, 2), (4, 2), (3, 8), (4, 64)])
def test_unbound_ranks_divide_the_host_cpus(ranks, host_cpus):
    vs = views(ranks, cpus=range(host_cpus))
    shares = [rank_share(vs, i) for i in range(ranks)]
    assert sum(s.cpus for s in shares) == host_cpus
    assert max(s.cpus for s in shares) - min(s.cpus for s in shares) <= 1


def test_bound_ranks_own_their_masks():
    vs = views(4, cpus=range(8), bound=True)
    assert [rank_share(vs, i).cpus for i in range(4)] == [2, 2, 2, 2]


def test_memory_and_object_store_sum_to_the_host_and_fit_shm():
    vs = views(4, memory=24 * GIB, shm=4 * GIB)
    shares = [rank_share(vs, i) for i in range(4)]
    assert sum(s.memory + s.object_store for s in shares) <= 24 * GIB
    assert sum(s.object_store for s in shares) <= 4 * GIB
    assert any("/dev/shm" in note for note in shares[0].notes)


def test_gpus_are_dealt_out_without_overlap():
    vs = views(2, gpus=("0", "1", "2", "3"))
    assert rank_share(vs, 0).gpu_ids == ("0", "2")
    assert rank_share(vs, 1).gpu_ids == ("1", "3")


def test_overrides_win():
    vs = views(2, cpus=range(8))
    share = rank_share(vs, 0, num_cpus=1, object_store_memory=GIB)
    assert share.cpus == 1 and share.object_store == GIB
    assert rank_share(vs, 0, cpus_per_task=2).cpus == 2


def test_object_store_that_does_not_fit_is_refused():
    view = views(1, memory=8 * GIB, shm=2 * GIB)[0]
    assert check_object_store(None, view, 4) is None
    assert check_object_store(GIB // 4, view, 4) is None
    problem = check_object_store(GIB, view, 4)
    assert "/dev/shm" in problem and "h" in problem


def test_gpus_bound_per_rank_stay_with_their_rank():
    """srun --gpus-per-task or a binding script gives each rank GPUs of its own: no dealing out."""
    vs = [HostView("h", (0,), 24 * GIB, 12 * GIB, ("0", "1")), HostView("h", (1,), 24 * GIB, 12 * GIB, ("2", "3"))]
    assert rank_share(vs, 0).gpu_ids == ("0", "1")
    assert rank_share(vs, 1).gpu_ids == ("2", "3")


def test_visible_gpus_from_environment():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}).ids == ("2", "3")
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}).ids == ()
    amd = visible_gpus({"SLURM_JOB_ID": "1", "CUDA_VISIBLE_DEVICES": "0,1", "ROCR_VISIBLE_DEVICES": "4,5"})
    assert (amd.vendor, amd.ids) == ("amd", ("4", "5"))  # Slurm sets both on an AMD node: ROCR's are the GPUs


def test_a_share_keeps_its_vendor_and_says_where_its_gpus_came_from():
    vs = [HostView("h", (0, 1), 24 * GIB, 12 * GIB, ("4", "5", "6", "7"), gpu_vendor="amd",
                   gpu_source="ROCR_VISIBLE_DEVICES")] * 2
    share = rank_share(vs, 1)
    assert (share.gpu_vendor, share.gpu_ids) == ("amd", ("5", "7"))
    assert any("amd GPUs 4,5,6,7 from ROCR_VISIBLE_DEVICES: this node gets 5,7" in note for note in share.notes)


def test_a_host_plan_gives_each_rank_its_share_or_idles_it():
    from mpiray.config import Config
    from mpiray.host.resources import plan_shares

    per_rank = plan_shares(Config(head_cpus=0), views(2, cpus=range(8)), True, None)
    assert [share.cpus for share in per_rank] == [0, 4]  # --head-cpus 0 for the head only
    per_host = plan_shares(Config(ray_node_per="host"), views(3, cpus=range(6), bound=True), False, None)
    assert per_host[1:] == [None, None]
    assert per_host[0].cpus == 6  # the merged masks of the host's three ranks


def test_a_hosts_ports_are_sized_by_its_nodes_and_refused_past_its_port_range():
    from mpiray.config import Config
    from mpiray.host.resources import plan_shares, port_units, ports_problem

    kestrel = plan_shares(Config(num_cpus=104), views(1, cpus=range(2)), True, None)
    assert port_units(kestrel) == [3] and ports_problem(kestrel, "x1000c0s0b0n0") is None
    split = plan_shares(Config(), views(4, cpus=range(104)), True, None)  # 4 ranks share a 104-CPU host
    assert port_units(split) == [1, 1, 1, 1]
    crowded = plan_shares(Config(num_cpus=104), views(41, cpus=range(2)), False, None)  # 41 x 300 > 12000 ports
    problem = ports_problem(crowded, "node7")
    assert "41 Ray nodes on node7 need 12300 ports" in problem and "at most 40 such nodes fit" in problem
    assert "--ray-node-per host" in problem


def test_the_head_hosts_other_nodes_leave_one_cpu_to_the_gcs():
    from mpiray.config import Config
    from mpiray.host.resources import head_core, plan_shares

    head, *workers = plan_shares(Config(), views(3, cpus=range(8)), True, None)
    assert head.affinity == ()  # the head keeps the rank's own CPUs, the kept one among them
    assert all(w.affinity == tuple(range(7)) for w in workers)
    assert "CPU 7 is left to the head's GCS: this node runs on CPUs 0-6" in workers[0].notes
    assert sum(share.cpus for share in (head, *workers)) == 8  # Ray's CPU counts do not change
    # Nothing to keep: another host than the head's, ranks bound to their own CPUs, one node, one CPU.
    assert all(share.affinity == () for share in plan_shares(Config(), views(3, cpus=range(8)), False, None))
    assert head_core(views(4, cpus=range(8), bound=True)) is None
    assert head_core(views(1, cpus=range(8))) is None
    assert head_core(views(3, cpus=[5]), "on") is None
    assert head_core(views(2, cpus=[0, 2, 9]), "on") == 9
    # auto: only on hosts of 8 CPUs or more; on and off say so for any host.
    assert head_core(views(4, cpus=range(7))) is None and head_core(views(4, cpus=range(7)), "on") == 6
    assert head_core(views(4, cpus=range(64)), "off") is None


def test_a_node_left_only_the_head_cpu_keeps_its_own():
    from mpiray.host.resources import rank_share

    overlapping = [HostView("h", (0, 1), GIB, GIB, ()), HostView("h", (1,), GIB, GIB, ()), HostView("h", (0, 1), GIB, GIB, ())]
    assert rank_share(overlapping, 1, head_core=1).affinity == ()
    assert rank_share(overlapping, 2, head_core=1).affinity == (0,)
    assert rank_share(overlapping, 2, head_core=7).affinity == ()  # not this rank's CPU: nothing to leave


def test_the_object_store_is_sized_from_dev_shms_free_space_not_its_size():
    """Stale MPI segments (a SIGKILLed job's mpich_shm_*) take /dev/shm's space: Ray compares its store with the
    free space and, short of it, moves the store to disk or refuses to start."""
    stale = [HostView("h", (0,), 24 * GIB, 1 * GIB, (), shm_total=12 * GIB),
             HostView("h", (1,), 24 * GIB, 1 * GIB, (), shm_total=12 * GIB)]
    share = rank_share(stale, 0)
    assert share.object_store == int(1 * GIB * 0.9) // 2  # 90% of what is free, split between the host's nodes
    assert any("of 1024 MiB free, of 12288 MiB" in note for note in share.notes)


def test_a_node_with_a_dev_shm_of_its_own_gets_a_store_that_fits_it_or_is_refused():
    from mpiray.host.resources import MIN_OBJECT_STORE, Share, fit_own_shm

    view = HostView("h", (0,), 24 * GIB, 12 * GIB, (), shm_total=12 * GIB)
    share = Share(cpus=2, gpu_ids=(), memory=6 * GIB, object_store=2 * GIB)
    assert fit_own_shm(share, 12 * GIB, 12 * GIB, view, where="x") == share  # the host's /dev/shm: as planned
    fitted = fit_own_shm(share, 1 * GIB, 1 * GIB, view, where="the image on h")
    assert fitted.object_store == int(GIB * 0.9) and fitted.memory == share.memory + share.object_store - fitted.object_store
    assert "does not fit the image on h's own /dev/shm (1024 MiB free of 1024 MiB)" in fitted.notes[-1]
    with pytest.raises(ValueError, match=r"holds 64 MiB .* smallest object store \(75 MiB\).*--ipc=host"):
        fit_own_shm(share, 64 * 2**20, 64 * 2**20, view, where="the image on h")
    assert MIN_OBJECT_STORE == 75 * 2**20


V1 = "5:devices:/\n4:memory:/slurm/uid_0/job_7/step_0\n0::/\n"
V2 = "0::/system.slice/slurmstepd.scope/job_7/step_0\n"


@pytest.mark.parametrize("membership, files, limit", [
    # v1: the job's own cgroup holds the limit; the root says "none" with its huge number
    (V1, {"/sys/fs/cgroup/memory/slurm/uid_0/job_7/memory.limit_in_bytes": "4294967296\n",
          "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 2**32),
    # v2: the lowest over the step and its parents; "max" is no limit
    (V2, {"/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/memory.max": "max\n",
          "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/memory.max": "8589934592\n",
          "/sys/fs/cgroup/system.slice/memory.max": "6442450944\n"}, 6 * 2**30),
    # v2 mounted at /sys/fs/cgroup/unified beside v1's controllers (a hybrid host)
    ("0::/job\n", {"/sys/fs/cgroup/unified/job/memory.max": "1073741824"}, 2**30),
    (V1, {}, None),  # nothing readable: no limit
    (V2, {"/sys/fs/cgroup/system.slice/memory.max": "max"}, None),
])
def test_the_memory_limit_is_the_lowest_of_the_processs_own_cgroup_and_its_parents(membership, files, limit):
    assert cgroup_memory_limit(membership, files.get) == limit
