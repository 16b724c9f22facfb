//! Standard output, which its reader may close early (`cascade queue list | head -1`): a
//! write to a closed pipe ends the command quietly with 141, the code a shell reports for a
//! command ended by SIGPIPE, where `println!` would panic. Any other failure to write is
//! the command's one line on standard error and exit code 1.

use std::io::{ErrorKind, Write};
use std::process;

/// Code of a command whose reader went away: 128 + SIGPIPE.
const READER_GONE: i32 = 141;

pub fn write(text: std::fmt::Arguments<'_>) {
    if let Err(e) = std::io::stdout().lock().write_fmt(text) {
        end(&e);
    }
}

/// Sends on what is written so far (a view redrawn in place).
pub fn flush() {
    if let Err(e) = std::io::stdout().lock().flush() {
        end(&e);
    }
}

fn end(e: &std::io::Error) -> ! {
    if e.kind() == ErrorKind::BrokenPipe {
        process::exit(READER_GONE);
    }
    eprintln!("error: cannot write to standard output: {e}");
    process::exit(1);
}

/// `print!` to [`write`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!($($arg)*))
    };
}

/// `println!` to [`write`].
macro_rules! outln {
    () => {
        $crate::stdout::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}
