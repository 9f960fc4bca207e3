// The MPI communicator (kernels/cpu/communicator.h) over MPI_COMM_WORLD, on host memory: what
// the CPU backend's collective kernels (kernels/cpu/collective.cc) exchange through when
// foundry-run is started by mpirun.
//
//  - MPI is initialised once per process, on the first MpiWorld() (MPI_Init_thread, funneled:
//    only the thread that called it calls MPI), and finalized at exit; nothing initialises it in a
//    process that never asks (a single-process run links MPI and never starts it).
//  - Errors are Status values: the world's error handler is MPI_ERRORS_RETURN, and a failed call
//    says which collective failed and MPI_Error_string's words.
//  - Sizes are int64 bytes: each collective moves at most MpiChunkBytes() per call, the receive
//    side laid out by a datatype whose extent is the per-rank size (MPI's counts are int).
//  - A build without MPI (CMake found none: FOUNDRY_MPI unset) has these functions too: MpiWorld()
//    is then an error that says how to build with MPI.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/cpu/communicator.h"

namespace foundry {

// Whether this build has MPI (FOUNDRY_MPI).
bool BuiltWithMpi();

// The world size mpirun started this process in (OMPI_COMM_WORLD_SIZE, or PMI_SIZE /
// PMIX_SIZE for other launchers), read from the environment without starting MPI; 0 when it was
// not started by a launcher.
int LauncherWorldSize();
// This process's rank by the same variables (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK); 0
// without a launcher.
int LauncherRank();

// The MPI_COMM_WORLD communicator; the first call initialises MPI. The same object every call.
StatusOr<Communicator*> MpiWorld();

// After an error on one rank: ends every rank of the world (MPI_Abort), so that none waits
// forever in a collective the failed rank will never join. Does nothing when MPI was never
// initialised in this process.
void MpiAbortWorld(int exit_code);

// The most bytes one MPI call moves (default 1 GiB); larger transfers are split. Settable so that
// tests exercise the split on small buffers.
int64_t MpiChunkBytes();
void SetMpiChunkBytes(int64_t bytes);

}  // namespace foundry
