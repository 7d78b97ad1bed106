use std::process::ExitCode;

use clap::Parser;

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = redline::cli::Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("redline: cannot start the async runtime: {error}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(redline::cli::run(cli)) {
        Ok(code) => ExitCode::from(code as u8),
        Err(error) => {
            // A closed pipe (e.g. `| head`) is not a failure.
            if error.chain().any(|cause| {
                cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("redline: {error:#}");
            ExitCode::from(2)
        }
    }
}
