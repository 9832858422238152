//! The JIT tiers every differential test runs a program on: the x86 tier (`JitProgram::compile`)
//! and the optimizing tier (`JitProgram::compile_optimized`, Cranelift). One list, so that a test
//! covers each tier with the same code and a new tier joins every test at once.
#![allow(dead_code)] // each test binary uses part of it

use uebpf_vm::{JitError, JitProgram, Program};

pub type Compile = fn(&Program) -> Result<JitProgram, JitError>;

pub const TIERS: [(&str, Compile); 2] = [("jit", JitProgram::compile), ("opt", JitProgram::compile_optimized)];

/// What one run left: r0, the context afterwards, and any other memory the test watches.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub r0: u64,
    pub ctx: Vec<u8>,
    pub memory: Vec<u8>,
}

/// Memory outside the context that programs may write (map values): reset before each run,
/// read after it. `NONE` for tests whose programs write only their context and stack.
pub struct Watched<'a> {
    pub reset: &'a (dyn Fn() + Sync),
    pub read: &'a (dyn Fn() -> Vec<u8> + Sync),
}

pub const NONE: Watched<'static> = Watched { reset: &|| {}, read: &Vec::new };

/// The interpreter's outcome for `program` on `ctx` (an error if it stops the program), or None
/// where that outcome depends on where the context and the stack are: a program may return or
/// store a pointer (the kernel lets privileged programs leak them), and no two engines put their
/// frames at the same address. It runs twice, on copies of the context at different addresses,
/// on two threads' stacks; an outcome the two runs disagree on is not compared.
pub fn interpreted(program: &Program, ctx: &[u8], watched: &Watched, budget: u64) -> Result<Option<Outcome>, String> {
    let run = |ctx: &mut Vec<u8>| -> Result<Outcome, String> {
        (watched.reset)();
        let r0 = program.interpret(ctx, Some(budget)).map_err(|e| e.to_string())?;
        Ok(Outcome { r0, ctx: ctx.clone(), memory: (watched.read)() })
    };
    let (mut here, mut there) = (ctx.to_vec(), ctx.to_vec());
    let first = run(&mut here)?;
    let second = std::thread::scope(|scope| scope.spawn(|| run(&mut there)).join().expect("the interpreter does not panic"))?;
    Ok((first == second).then_some(first))
}

/// Runs `program` (loaded checked) on every tier, each on its own copy of `ctx` and with the
/// watched memory reset. Each tier's name with its outcome, or why it could not run.
pub fn run_checked_on_each(program: &Program, ctx: &[u8], watched: &Watched) -> Vec<(&'static str, Result<Outcome, String>)> {
    TIERS
        .iter()
        .map(|&(name, compile)| {
            (watched.reset)();
            let outcome = compile(program).map_err(|e| e.to_string()).and_then(|jit| {
                let mut ctx = ctx.to_vec();
                let r0 = jit.run_checked(&mut ctx)?;
                Ok(Outcome { r0, ctx, memory: (watched.read)() })
            });
            (name, outcome)
        })
        .collect()
}

/// Compares every tier's outcome with `expected` (the interpreter's): the disagreements, described.
pub fn disagreements(expected: &Outcome, program: &Program, ctx: &[u8], watched: &Watched) -> Vec<String> {
    run_checked_on_each(program, ctx, watched)
        .into_iter()
        .filter_map(|(name, outcome)| match outcome {
            Ok(got) if got == *expected => None,
            Ok(got) => Some(format!("{name} disagrees with the interpreter\n interpreter: {expected:x?}\n {name}: {got:x?}")),
            Err(e) => Some(format!("{name}: {e}")),
        })
        .collect()
}
