//! The `toolwatch` binary: the command line lives in the library (`toolwatch_cli::cli`).

/// mimalloc rather than glibc's malloc: the daemon allocates and frees many small strings per
/// span on several threads (decoding, builders), where glibc spent a fifth of the archive
/// thread in its free lists under a thousand tenants (BENCHMARKS.md, "Blast").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    no_transparent_huge_pages();
    toolwatch_cli::cli::main()
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
