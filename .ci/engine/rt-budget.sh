# Sourced by .ci/container and .ci/engine/sched-compare: a real-time budget for the container,
# where the kernel has RT group scheduling (the cgroup v1 cpu controller shows
# cpu.rt_runtime_us, as on this project's CI machines). There a new cgroup gets no budget, so
# SCHED_FIFO is refused even with CAP_SYS_NICE; the engine's parent cgroup must hold one and
# the container must ask for one (`cpu_rt_runtime`, Docker's dockerd --cpu-rt-runtime for the
# parent). Elsewhere (cgroup v2, or no RT group scheduling: Debian's and Ubuntu's kernels)
# CAP_SYS_NICE alone is enough and this does nothing.
#
#   rt_budget_lend          sets RT_ARGS (options for compose_podman.py); rt_budget_return
#                           gives the parent's old budget back (call it on exit)
RT_RUNTIME_US=950000   # the kernel's own default for the whole host (sched_rt_runtime_us)
RT_CGROUP_ROOT=/sys/fs/cgroup/cpu
RT_PARENT="$RT_CGROUP_ROOT/libpod_parent"   # podman's parent cgroup with cgroup_manager=cgroupfs
RT_ARGS=()
RT_OLD=""

rt_budget_lend() {
    [ -f "$RT_CGROUP_ROOT/cpu.rt_runtime_us" ] || return 0
    mkdir -p "$RT_PARENT"
    RT_OLD=$(cat "$RT_PARENT/cpu.rt_runtime_us")
    if ! echo "$RT_RUNTIME_US" > "$RT_PARENT/cpu.rt_runtime_us" 2>/dev/null; then
        echo "container: warning: no real-time budget for $RT_PARENT: the emulator will run unprioritised"
        return 0
    fi
    RT_ARGS=(--set "cpu_rt_runtime=$RT_RUNTIME_US")
    echo "container: this kernel has RT group scheduling (cgroup v1): real-time budget" \
        "$RT_RUNTIME_US us/s for $RT_PARENT and cpu_rt_runtime=$RT_RUNTIME_US for the container"
}

rt_budget_return() {
    [ -n "$RT_OLD" ] || return 0
    echo "$RT_OLD" > "$RT_PARENT/cpu.rt_runtime_us" 2>/dev/null || true
}
