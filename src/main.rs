//! The `toolwatch` binary: the command line lives in the library (`toolwatch_cli::cli`).

/// mimalloc rather than glibc's malloc: the daemon allocates and frees many small strings per
/// span on several threads (decoding, builders), where glibc spent a fifth of the archive
/// thread in its free lists under a thousand tenants (BENCHMARKS.md, "Blast").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    no_transparent_huge_pages();
    toolwatch::memory::install_give_back(give_back_freed_memory);
    toolwatch_cli::cli::main()
}

/// Has mimalloc return the memory it holds free to the system now, not after its purge delay
/// (a second): the daemon calls it while its resident memory is over
/// `pipeline.resident_limit` (`toolwatch::memory`).
fn give_back_freed_memory() {
    // SAFETY: mi_collect takes a flag and works on the allocator's own state, which it
    // guards itself; it is documented as callable from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Transparent huge pages off for this process. mimalloc advises them for its arena, so each
/// buffer growing into fresh memory (Parquet encoders, Arrow builders, request bodies) had the
/// kernel zero a whole 2 MiB page at its first touch, and again after each purge: 6-10% of the
/// daemon's samples at small exports, and a fifth of its peak RSS (BENCHMARKS.md, "Small
/// exports").
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes integers only and touches no memory of this process's;
    // a kernel without it answers EINVAL, which changes nothing.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
