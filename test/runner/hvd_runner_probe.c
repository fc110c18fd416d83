// SPDX-License-Identifier: Apache-2.0
// Example MPI program for hvdrun's tests: reports where each rank runs; can fail or sleep.
//
// Every rank prints `PROBE rank=R size=S host=H netns=N local_rank=L hvd_hostname=X`.
// Options: --expect-hosts N  rank 0 gathers all reports, checks N distinct hosts and that
//                            same hostname <=> same network namespace, prints PROBE OK/FAIL;
//          --exit-rank R --code C  rank R exits with C right after reporting (others block
//                            in a barrier until hvdrun stops them);
//          --sleep S         every rank prints `PROBE ready rank=R` and sleeps S seconds;
//          --marker WORD     ignored; lets tests find these processes with pgrep -f.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STR 64

int main(int argc, char** argv) {
  int expect_hosts = 0, exit_rank = -1, code = 0, sleep_s = 0;
  for (int i = 1; i + 1 < argc; i++) {
    if (!strcmp(argv[i], "--expect-hosts")) expect_hosts = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--exit-rank")) exit_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--code")) code = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--sleep")) sleep_s = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--marker")) ++i;
  }
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char host[STR] = {0}, netns[STR] = {0};
  gethostname(host, STR - 1);
  ssize_t n = readlink("/proc/self/ns/net", netns, STR - 1);
  netns[n < 0 ? 0 : n] = 0;
  const char* lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const char* hh = getenv("HVD_HOSTNAME");
  printf("PROBE rank=%d size=%d host=%s netns=%s local_rank=%s hvd_hostname=%s\n", rank, size,
         host, netns, lr ? lr : "?", hh ? hh : "?");
  fflush(stdout);
  if (rank == exit_rank) exit(code);

  if (expect_hosts > 0) {
    char* hosts = malloc((size_t)size * STR);
    char* nss = malloc((size_t)size * STR);
    MPI_Gather(host, STR, MPI_CHAR, hosts, STR, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Gather(netns, STR, MPI_CHAR, nss, STR, MPI_CHAR, 0, MPI_COMM_WORLD);
    long v = rank + 1, sum = 0;
    MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
      int distinct = 0, bad = sum != (long)size * (size + 1) / 2;
      for (int i = 0; i < size; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) {
          int same_host = !strcmp(hosts + i * STR, hosts + j * STR);
          int same_ns = !strcmp(nss + i * STR, nss + j * STR);
          if (same_host != same_ns) bad = 1;
          if (same_host) seen = 1;
        }
        if (!seen) distinct++;
      }
      if (distinct != expect_hosts) bad = 1;
      printf("PROBE %s: %d ranks on %d hosts (expected %d)\n", bad ? "FAIL" : "OK", size,
             distinct, expect_hosts);
      fflush(stdout);
      if (bad) code = 1;
    }
    free(hosts);
    free(nss);
  }
  if (sleep_s > 0) {
    printf("PROBE ready rank=%d\n", rank);
    fflush(stdout);
    for (int i = 0; i < sleep_s; i++) sleep(1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return rank == 0 ? code : 0;
}
