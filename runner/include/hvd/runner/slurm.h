// SPDX-License-Identifier: Apache-2.0
// A Slurm allocation as hvdrun's hosts and slots: parsers of Slurm's environment variables and
// the check of -np/-H against the allocation. Pure functions, no I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/runner/hosts.h"

namespace hvd::runner {

// Expands a Slurm host list (SLURM_JOB_NODELIST) into host names, in Slurm's order:
// "node[01-04,07],gpu-a[1-2],login" -> node01 node02 node03 node04 node07 gpu-a1 gpu-a2 login.
// A range keeps the zero padding of its first bound ("[08-10]" -> 08 09 10); several bracket
// groups in one name expand as a product, the last varying fastest ("r[1-2]n[1-2]" -> r1n1 r1n2
// r2n1 r2n2). Throws UsageError naming the variable, the bad part and what was expected.
std::vector<std::string> expand_slurm_nodelist(std::string_view spec);

// Expands SLURM_TASKS_PER_NODE ("2(x3),1" -> 2 2 2 1). Throws UsageError on malformed input.
std::vector<int> expand_slurm_tasks_per_node(std::string_view spec);

// The values of the Slurm variables hvdrun reads ("" = unset).
struct SlurmEnv {
  std::string job_id;          // SLURM_JOB_ID (or SLURM_JOBID)
  std::string nodelist;        // SLURM_JOB_NODELIST (or SLURM_NODELIST)
  std::string tasks_per_node;  // SLURM_TASKS_PER_NODE
  std::string ntasks;          // SLURM_NTASKS (or SLURM_NPROCS); unset when salloc had no -n
};

// One allocation: its nodes with the tasks Slurm gives each (as slots) and the task count.
struct SlurmAllocation {
  std::string job_id;
  std::vector<HostSlots> hosts;  // node name, tasks on it
  int ntasks = 0;                // SLURM_NTASKS, else the sum of the tasks per node
};

// nullopt when not inside an allocation (no job id or no node list). Otherwise the allocation;
// throws UsageError when the variables are malformed or disagree (node and count lists of
// different lengths, SLURM_NTASKS above the tasks per node).
std::optional<SlurmAllocation> slurm_allocation(const SlurmEnv& env);

// What hvdrun launches inside an allocation.
struct SlurmPlan {
  std::vector<HostSlots> hosts;  // hosts and slots offered to assign_slots()
  int np = 0;
};

// Checks what the user asked (np: 0 = no -np; requested: hosts of -H/--hostfile, empty = none)
// against the allocation and returns the hosts and rank count to launch:
// - nothing asked: every allocated node with its tasks, np = the allocation's task count;
// - -np only: the allocated nodes, np as asked (at most the allocation's task count);
// - -H: each host must be an allocated node (a name for this machine, such as localhost,
//   matches the node that is own_hostname) with at most its allocated tasks; np defaults to
//   the hosts' total slots.
// Throws UsageError naming what was asked and what the allocation has when it asks for more.
SlurmPlan plan_in_allocation(const SlurmAllocation& alloc, int np,
                             const std::vector<HostSlots>& requested,
                             std::string_view own_hostname);

// "job 42: node01:2,node02:2 (4 tasks)", for messages and --dry-run.
std::string describe_allocation(const SlurmAllocation& alloc);

}  // namespace hvd::runner
