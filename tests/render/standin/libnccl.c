/* Stand-in for NCCL's libnccl.so.2, for tests only: the one entry point clusterkit's job probe
 * calls, ncclGetVersion(int *version) -> ncclSuccess (0), with the version code the test builds
 * it with (-DCODE=...; NCCL_VERSION_CODE is X*10000+Y*100+Z from 2.9, X*1000+Y*100+Z before). */
int ncclGetVersion(int *version) {
  *version = CODE;
  return 0;
}
