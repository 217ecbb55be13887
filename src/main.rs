//! The `toolwatch` binary: the command line lives in the library (`toolwatch_cli::cli`).

/// mimalloc rather than glibc's malloc: the daemon allocates and frees many small strings per
/// span on several threads (decoding, builders), where glibc spent a fifth of the archive
/// thread in its free lists under a thousand tenants (BENCHMARKS.md, "Blast").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    toolwatch_cli::cli::main()
}
