! The same calls through use mpi_f08.
program profcheck
  use mpi_f08
  implicit none
  integer :: rank, np, i
  type(MPI_Comm) :: half, dup
  double precision :: d(100), e(100)
  character :: c(16)
  integer :: x, y
  integer, allocatable :: counts(:), displs(:)
  character, allocatable :: big(:)
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, np)
  allocate(counts(np), displs(np), big(16 * np))
  d = 1.0d0
  c = 'a'
  x = 1
  do i = 1, 3
    call MPI_Allreduce(d, e, 100, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
  end do
  do i = 1, 5
    call MPI_Bcast(c, 16, MPI_CHARACTER, 0, MPI_COMM_WORLD)
  end do
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), rank, half)
  do i = 1, 7
    call MPI_Reduce(x, y, 1, MPI_INTEGER, MPI_SUM, 0, half)
  end do
  call MPI_Comm_dup(MPI_COMM_WORLD, dup)
  do i = 1, 4
    call MPI_Barrier(dup)
  end do
  do i = 1, np
    counts(i) = 16
    displs(i) = 16 * (i - 1)
  end do
  do i = 1, 2
    call MPI_Allgatherv(c, 16, MPI_CHARACTER, big, counts, displs, MPI_CHARACTER, &
                        MPI_COMM_WORLD)
  end do
  call MPI_Comm_free(dup)
  call MPI_Comm_free(half)
  call MPI_Finalize()
end program profcheck
