//! Corrupted objects are errors: never a panic that escapes, an abort or a hang, through the Rust
//! API, the C API (`uebpf_object_open`, which used to abort its host) and the `uebpf` command.
//!
//! * `saved_corrupt_objects_are_refused`: the inputs that crashed or hung before (`corrupt/`).
//! * `mutated_objects_are_errors_not_crashes`: a bounded, deterministic fuzz run over the
//!   project's objects (`UEBPF_OBJECTS`) and a small object built here with clang. A failing
//!   input is saved to the temporary directory, to be added to `corrupt/`.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use uebpf::{Engine, Object, Target};

/// Whole fuzz run; each input also gets its own bound.
/// The same inputs on every machine (a fixed seed and count): a finding can be reproduced, and a
/// faster machine does not reach inputs a slower one never tried. ~20 s here; the time cap only
/// keeps a much slower machine's `make test` bounded (it then checks a prefix of the same inputs).
const FUZZ_INPUTS: u64 = 16_000;
const FUZZ_TIME: Duration = Duration::from_secs(90);
const INPUT_TIME: Duration = Duration::from_secs(10);
/// Loading an object builds a region its size: mutated sizes are fine up to this.
const LOAD_ARENA_LIMIT: u64 = 64 << 20;

fn corrupt_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corrupt")
}

/// `uebpf_object_open` on a file: Ok if it opened (the object is closed again), else the error.
fn open_through_c(path: &Path) -> Result<(), String> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; the object is closed at once; the error is ours (thread).
    unsafe {
        let object = uebpf::ffi::uebpf_object_open(c_path.as_ptr());
        if object.is_null() {
            return Err(CStr::from_ptr(uebpf::ffi::uebpf_last_error()).to_string_lossy().into_owned());
        }
        uebpf::ffi::uebpf_object_close(object);
        Ok(())
    }
}

/// An error message as the APIs promise it: one non-empty line.
fn one_line(message: &str) {
    assert!(!message.is_empty() && !message.contains('\n'), "not one line: {message:?}");
}

#[test]
fn saved_corrupt_objects_are_refused() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corrupt_dir()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let data = std::fs::read(path).unwrap();
        let opened = Object::from_bytes(&name, &data);
        let info = Command::new(env!("CARGO_BIN_EXE_uebpf")).arg("info").arg(path).output().unwrap();
        let stderr = String::from_utf8_lossy(&info.stderr);
        if name.starts_with("array-of-2-pow-31-entries") {
            // Parses fine; its map would need 16 GiB: refused at load, quickly, by every path.
            let object = opened.unwrap();
            let err = object.region_spec().unwrap_err().to_string();
            assert!(err.contains("map `values`") && err.contains("more than uebpf's limit"), "{err}");
            assert!(object.load(Target::Anonymous).is_err());
            assert!(info.status.success(), "{stderr}");
            let document: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
            let values = document["maps"].as_array().unwrap().iter().find(|m| m["name"] == "values").unwrap().clone();
            assert_eq!((values["max_entries"].as_u64(), values["supported"].as_bool()), (Some(1 << 31), Some(false)), "{values}");
            let started = Instant::now();
            let run = Command::new(env!("CARGO_BIN_EXE_uebpf")).arg("run").arg(path).arg("empty").output().unwrap();
            let stderr = String::from_utf8_lossy(&run.stderr);
            assert_eq!(run.status.code(), Some(1), "{stderr}");
            assert!(stderr.contains("more than uebpf's limit") && stderr.lines().count() == 1, "{stderr}");
            assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
            continue;
        }
        let err = opened.err().unwrap_or_else(|| panic!("{name} opened")).to_string();
        one_line(&err);
        let c_err = open_through_c(path).expect_err("uebpf_object_open refuses it");
        one_line(&c_err);
        assert!(c_err.contains(&err), "{c_err} / {err}");
        // The command: status 1, and the panic aya-obj raised inside is one line, not a
        // message plus a backtrace (the test environment may set RUST_BACKTRACE).
        assert_eq!(info.status.code(), Some(1), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(stderr.starts_with("uebpf: ") && !stderr.contains("panicked"), "{stderr}");
    }
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// Values that tend to break size and offset arithmetic.
    fn interesting(&mut self, len: usize) -> u64 {
        let values = [
            0,
            1,
            4,
            8,
            0x7f,
            0x80,
            0xff,
            0xffff,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            1 << 32,
            1 << 63,
            u64::MAX,
            len as u64,
            len as u64 + 1,
        ];
        if self.below(4) == 0 {
            self.next()
        } else {
            values[self.below(values.len())]
        }
    }
}

/// Section headers of an ELF64 little-endian file: (name offset in the file's shstrtab name, header offset).
fn section_headers(data: &[u8]) -> Vec<(String, usize)> {
    let u16_at = |at: usize| data.get(at..at + 2).map(|b| u16::from_le_bytes(b.try_into().unwrap()) as usize);
    let u32_at = |at: usize| data.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    let u64_at = |at: usize| data.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize);
    let (Some(shoff), Some(shnum), Some(shstrndx)) = (u64_at(0x28), u16_at(0x3c), u16_at(0x3e)) else { return Vec::new() };
    let strings = shoff.checked_add(shstrndx * 64 + 24).and_then(u64_at).unwrap_or(0);
    (0..shnum)
        .filter_map(|i| {
            let header = shoff.checked_add(i * 64)?;
            let name_at = strings.checked_add(u32_at(header)?)?;
            let name = data.get(name_at..)?.split(|&b| b == 0).next()?;
            Some((String::from_utf8_lossy(name).into_owned(), header))
        })
        .collect()
}

/// One corruption of `data`: bit flips, truncation, ELF header bytes, a section header field,
/// words inside BTF/maps/symbol/relocation sections, random chunks.
fn mutate(rng: &mut Rng, data: &[u8]) -> Vec<u8> {
    let mut d = data.to_vec();
    let len = d.len();
    match rng.below(7) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let at = rng.below(len);
                d[at] ^= 1 << rng.below(8);
            }
        }
        1 => d.truncate(rng.below(len)),
        2 => {
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(64.min(len));
                d[at] = rng.next() as u8;
            }
        }
        3 | 4 => {
            let headers = section_headers(&d);
            if headers.is_empty() {
                d[rng.below(len)] ^= 0xff;
                return d;
            }
            let (name, header) = headers[rng.below(headers.len())].clone();
            let value = rng.interesting(len);
            let content = |d: &[u8]| -> Option<(usize, usize)> {
                let offset = u64::from_le_bytes(d.get(header + 24..header + 32)?.try_into().ok()?) as usize;
                let size = u64::from_le_bytes(d.get(header + 32..header + 40)?.try_into().ok()?) as usize;
                (size >= 4 && offset.checked_add(size)? <= d.len()).then_some((offset, size))
            };
            let inside = [".BTF", ".BTF.ext", ".maps", ".symtab", ".strtab"].contains(&name.as_str()) || name.starts_with(".rel");
            match (rng.below(2), inside.then(|| content(&d)).flatten()) {
                // A 4-byte word of the section's contents.
                (0, Some((offset, size))) => {
                    let at = offset + rng.below(size - 3) / 4 * 4;
                    d[at..at + 4].copy_from_slice(&(value as u32).to_le_bytes());
                }
                // A field of the header: type, flags, offset, size, link, info, alignment, entry size.
                _ => {
                    let fields: [(usize, usize); 8] = [(4, 4), (8, 8), (24, 8), (32, 8), (40, 4), (44, 4), (48, 8), (56, 8)];
                    let (at, width) = fields[rng.below(fields.len())];
                    if header + at + width <= len {
                        d[header + at..header + at + width].copy_from_slice(&value.to_le_bytes()[..width]);
                    }
                }
            }
        }
        5 => {
            let at = rng.below(len);
            for b in d.iter_mut().skip(at).take(1 + rng.below(16)) {
                *b = rng.next() as u8;
            }
        }
        _ => {
            let (from, to, n) = (rng.below(len), rng.below(len), 1 + rng.below(64));
            let chunk: Vec<u8> = d.iter().skip(from).take(n).copied().collect();
            for (b, c) in d.iter_mut().skip(to).zip(chunk) {
                *b = c;
            }
        }
    }
    d
}

/// Everything a loader does with an object short of running it; errors are fine, and must be
/// one line. `c_path`: also open it through the C API from that file.
fn exercise(data: &[u8], c_path: Option<&Path>, load: bool) {
    match Object::from_bytes("fuzz", data) {
        Err(e) => one_line(&e.to_string()),
        Ok(object) => {
            let programs = object.programs();
            let _ = object.maps();
            match object.region_spec() {
                Err(e) => one_line(&e.to_string()),
                Ok(spec) if load && spec.arena_bytes <= LOAD_ARENA_LIMIT => match object.load(Target::Anonymous) {
                    Err(e) => one_line(&e.to_string()),
                    Ok(instance) => {
                        for program in &programs {
                            for engine in [Engine::Interpreter, Engine::Jit] {
                                // Compiled, never run: a corrupted program is not trusted.
                                if let Err(e) = instance.program(&program.name, engine) {
                                    one_line(&e.to_string());
                                }
                            }
                        }
                    }
                },
                Ok(_) => {}
            }
        }
    }
    if let Some(path) = c_path {
        std::fs::write(path, data).unwrap();
        if let Err(e) = open_through_c(path) {
            one_line(&e);
        }
    }
}

/// A small object with what the project's objects have (BTF-defined maps, .data, .rodata, .bss,
/// a bpf-to-bpf call, a map lookup), built with clang; None (and why) if that is not possible.
fn built_object(dir: &Path) -> Option<Vec<u8>> {
    let source = dir.join("tiny.bpf.c");
    let object = dir.join("tiny.bpf.o");
    std::fs::write(
        &source,
        r#"
#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
struct { __uint(type, 2); __uint(max_entries, 4); __type(key, int); __type(value, long); } counts SEC(".maps");
struct { __uint(type, 27); __uint(max_entries, 4096); } ring SEC(".maps");
long total;
long start = 5;
const volatile int scale = 3;
static long (*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static __attribute__((noinline)) long scaled(long x) { return x * scale; }
SEC("uprobe") int probe(void *ctx) {
    int key = 0;
    long *value = bpf_map_lookup_elem(&counts, &key);
    if (value) __sync_fetch_and_add(value, 1);
    total += scaled(start);
    return 0;
}
char LICENSE[] SEC("license") = "GPL";
"#,
    )
    .ok()?;
    let built = Command::new("clang").args(["-O2", "-g", "-target", "bpf", "-c"]).arg(&source).arg("-o").arg(&object).output();
    match built {
        Ok(out) if out.status.success() => std::fs::read(&object).ok(),
        Ok(out) => {
            eprintln!("not fuzzing a clang-built object: clang failed: {}", String::from_utf8_lossy(&out.stderr));
            None
        }
        Err(e) => {
            eprintln!("not fuzzing a clang-built object: cannot run clang: {e}");
            None
        }
    }
}

#[test]
fn mutated_objects_are_errors_not_crashes() {
    let dir = std::env::temp_dir().join(format!("uebpf-corrupt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    match std::env::var_os("UEBPF_OBJECTS") {
        Some(objects) => {
            let mut paths: Vec<PathBuf> = std::fs::read_dir(&objects)
                .unwrap_or_else(|e| panic!("UEBPF_OBJECTS={}: {e}", Path::new(&objects).display()))
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().ends_with(".bpf.o"))
                .collect();
            paths.sort();
            seeds.extend(paths.iter().map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(p).unwrap())));
        }
        None => eprintln!("not fuzzing the project's objects: UEBPF_OBJECTS is not set (make runtime-test sets it)"),
    }
    if let Some(tiny) = built_object(&dir) {
        seeds.push(("tiny.bpf.o (built here)".into(), tiny));
    }
    if seeds.is_empty() {
        eprintln!("skipped: no object to mutate");
        return;
    }
    // Every seed opens cleanly, or the run would only exercise error paths.
    for (name, data) in &seeds {
        Object::from_bytes(name, data).unwrap_or_else(|e| panic!("{name} does not open unmutated: {e}"));
    }

    let mut rng = Rng(0x5eed_c0ff_ee00_0001);
    let started = Instant::now();
    let mut inputs = 0u64;
    while inputs < FUZZ_INPUTS && started.elapsed() < FUZZ_TIME {
        let (name, seed) = &seeds[inputs as usize % seeds.len()];
        let data = mutate(&mut rng, seed);
        // The C path writes a file: every 4th input. Loading (regions, CO-RE against the
        // kernel's BTF, JIT compilation) is slower: every 8th.
        let c_path = inputs.is_multiple_of(4).then(|| dir.join("input.bpf.o"));
        let load = inputs.is_multiple_of(8);
        let (done, finished) = mpsc::channel();
        let input = data.clone();
        std::thread::spawn(move || {
            exercise(&input, c_path.as_deref(), load);
            let _ = done.send(());
        });
        let outcome = finished.recv_timeout(INPUT_TIME);
        if outcome.is_err() {
            let saved = std::env::temp_dir().join(format!("uebpf-corrupt-failure-{inputs}.bpf.o"));
            std::fs::write(&saved, &data).unwrap();
            let why = match outcome {
                Err(mpsc::RecvTimeoutError::Timeout) => format!("took more than {INPUT_TIME:?}"),
                _ => "panicked (see above)".into(),
            };
            panic!("input {inputs} (a mutation of {name}) {why}: saved as {}", saved.display());
        }
        inputs += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{inputs} mutated objects from {} seeds in {:?}: no panic, abort or hang", seeds.len(), started.elapsed());
    assert!(inputs >= seeds.len() as u64);
}
