! The Fortran twin of profcheck.c (use mpi): calls whose counts tests/test_profile.py knows.
program profcheck
  use mpi
  implicit none
  integer :: ierr, rank, np, i, half, dup
  double precision :: d(100), e(100)
  character :: c(16)
  integer :: x, y
  integer, allocatable :: counts(:), displs(:)
  character, allocatable :: big(:)
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  allocate(counts(np), displs(np), big(16 * np))
  d = 1.0d0
  c = 'a'
  x = 1
  do i = 1, 3  ! 100 doubles: 800 B, bucket 1024
    call MPI_Allreduce(d, e, 100, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  end do
  do i = 1, 5  ! 16 B
    call MPI_Bcast(c, 16, MPI_CHARACTER, 0, MPI_COMM_WORLD, ierr)
  end do
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), rank, half, ierr)
  do i = 1, 7  ! 1 integer: 4 B, on a communicator of np/2
    call MPI_Reduce(x, y, 1, MPI_INTEGER, MPI_SUM, 0, half, ierr)
  end do
  call MPI_Comm_dup(MPI_COMM_WORLD, dup, ierr)
  do i = 1, 4
    call MPI_Barrier(dup, ierr)
  end do
  do i = 1, np
    counts(i) = 16
    displs(i) = 16 * (i - 1)
  end do
  do i = 1, 2  ! 16 B from every rank
    call MPI_Allgatherv(c, 16, MPI_CHARACTER, big, counts, displs, MPI_CHARACTER, &
                        MPI_COMM_WORLD, ierr)
  end do
  call MPI_Comm_free(dup, ierr)
  call MPI_Comm_free(half, ierr)
  call MPI_Finalize(ierr)
end program profcheck
