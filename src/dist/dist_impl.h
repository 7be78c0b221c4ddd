// Internal interface of src/dist shared by the communication layer
// (comm.c, collectives.c) and the parts built on it (DDP, parameter server).
#ifndef WEFT_DIST_IMPL_H
#define WEFT_DIST_IMPL_H

#include <weft/device.h>
#include <weft/dist.h>

struct weft_module;
// Every parameter and buffer of m takes rank 0's values (collective over c):
// how DDP and ZeRO start their replicas equal. Errors name `who` and the tensor.
weft_status weft_dist_broadcast_module(weft_comm *c, struct weft_module *m, const char *who);

#ifdef WEFT_HAVE_MPI
#include <mpi.h>

// A communicator private to the caller's point-to-point traffic: a dup of
// c's group, so messages sent on it never match weft's own collectives or
// control messages (which run on other dups). Borrowed; valid until
// weft_comm_free(c). MPI_COMM_NULL (with an error) when c is NULL.
MPI_Comm weft_comm_mpi(const weft_comm *c);

// The MPI datatype moving elements of dt (MPI_DATATYPE_NULL if none).
// f16/bf16 travel as 16-bit integers (data movement only, no reductions).
MPI_Datatype weft_dist_mpi_dtype(weft_dtype dt);
#endif

#endif
