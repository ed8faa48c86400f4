//! `cargo xtask cuda-toolkit`: a CUDA 13.0 toolkit for building candle's CUDA backend on a
//! machine with no CUDA, with no system install.
//!
//! - NVIDIA's wheels (nvcc, nvvm, cudart, crt, cccl) go into `target/cuda-toolkit/site`
//!   with `pip install --target`; the toolkit is `.../site/nvidia/cu13`. CUDA 13.0 matches
//!   the GPU host's driver (580); a newer nvcc emits PTX that driver may refuse.
//! - candle-core turns on cudarc's `dynamic-linking`, so binaries link against `libcuda`,
//!   `libnvrtc`, `libcublas`, `libcublasLt` and `libcurand`. Link-time stubs suffice: one
//!   shared object per library, with the real library's soname, defining every symbol of
//!   that library that the compiled rlibs leave undefined (read with `nm -u`, never a
//!   hand-written list). The real libraries are found on the GPU host at run time.
//!
//! The stubs need the rlibs, so this task generates them only when a CUDA build has
//! compiled them; `cargo xtask gpu-build` always regenerates them before linking.
//!
//! `--candle VERSION` picks the toolkit that candle release's cudarc accepts (its
//! `cuda-version-from-build-system` reads nvcc's version and refuses any it does not
//! know): CUDA 13.0 from candle 0.9.0, CUDA 12.8 for candle 0.8 (cudarc 0.13 knows up to
//! 12.8 and reads nvcc's version only). cudarc 0.16 (candle 0.9.0/0.9.1) knows up to 12.9
//! but takes the version from `CUDARC_CUDA_VERSION` before asking nvcc: it is set to
//! `12090`, so nvcc 13 compiles the kernels (candle-kernels 0.9.2, which those releases'
//! lockfiles resolve, builds with CUDA 13) and cudarc binds the 12.9 API, which the CUDA 13
//! libraries of the GPU host serve under their own sonames. NVIDIA's CUDA 12 nvcc wheels
//! carry no nvcc (only ptxas), so 0.8 needs a CUDA 12 toolkit installed (`CUDA_HOME`).
//! The 12.x wheels unpack into one folder per component, so their files are copied into
//! one toolkit root.

use crate::util::{self, run_cmd};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A CUDA toolkit release: its pinned wheels and where they unpack.
#[derive(Debug)]
pub struct CudaRelease {
    pub name: &'static str,
    wheels: &'static [&'static str],
    /// Folders under `site/nvidia` that make the toolkit root: one is used as it is,
    /// several are copied into `home/`.
    parts: &'static [&'static str],
    /// The major version in the sonames of nvrtc and cuBLAS.
    soname_major: &'static str,
}

/// The verified recipe (docs/gpu.md): matches the GPU host's driver (580).
pub const CUDA_13_0: CudaRelease = CudaRelease {
    name: "13.0",
    wheels: &[
        "nvidia-cuda-nvcc==13.0.88",
        "nvidia-nvvm==13.0.88",
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cuda-crt==13.0.88",
        "nvidia-cuda-cccl==13.0.85",
    ],
    parts: &["cu13"],
    soname_major: "13",
};

/// For the candle releases whose cudarc predates CUDA 13 (driver 580 runs 12.x too).
pub const CUDA_12_8: CudaRelease = CudaRelease {
    name: "12.8",
    wheels: &[
        "nvidia-cuda-nvcc-cu12==12.8.93",
        "nvidia-cuda-runtime-cu12==12.8.90",
        "nvidia-cuda-cccl-cu12==12.8.90",
    ],
    parts: &["cuda_nvcc", "cuda_runtime", "cuda_cccl"],
    soname_major: "12",
};

/// The toolkit a candle-core release builds with.
pub fn release_for_candle(candle: &str) -> &'static CudaRelease {
    let mut parts = candle.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if major == 0 && minor < 9 {
        &CUDA_12_8
    } else {
        &CUDA_13_0
    }
}

/// The CUDA version a candle-core release's cudarc is told (`CUDARC_CUDA_VERSION`) when
/// it would refuse the toolkit's nvcc: cudarc 0.16 (candle 0.9.0 and 0.9.1) knows CUDA up
/// to 12.9 and builds against the 13.0 toolkit told it is 12.9.
pub fn cudarc_version_for_candle(candle: &str) -> Option<&'static str> {
    let mut parts = candle.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor, patch) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    (major == 0 && minor == 9 && patch < 2).then_some("12090")
}

/// The compute capability candle's kernels are built for (H100/H200).
pub const COMPUTE_CAP: &str = "90";

/// One stub library: the name the linker asks for, the real library's soname (what the
/// binary will ask the loader for on the GPU host), and which symbols belong to it.
struct Stub {
    link_name: &'static str,
    /// The soname; `{}` is the toolkit's major version.
    soname: &'static str,
    owns: fn(&str) -> bool,
}

impl Stub {
    fn soname(&self, release: &CudaRelease) -> String {
        self.soname.replace("{}", release.soname_major)
    }
}

const STUBS: &[Stub] = &[
    Stub {
        link_name: "cuda",
        soname: "libcuda.so.1",
        // The driver API: `cu` then an upper-case letter (cuInit, cuMemPoolTrimTo...).
        owns: |s| s.len() > 2 && s.starts_with("cu") && s.as_bytes()[2].is_ascii_uppercase(),
    },
    Stub {
        link_name: "nvrtc",
        soname: "libnvrtc.so.{}",
        owns: |s| s.starts_with("nvrtc"),
    },
    Stub {
        link_name: "cublasLt",
        soname: "libcublasLt.so.{}",
        owns: |s| s.starts_with("cublasLt"),
    },
    Stub {
        link_name: "cublas",
        soname: "libcublas.so.{}",
        owns: |s| s.starts_with("cublas") && !s.starts_with("cublasLt"),
    },
    Stub {
        link_name: "curand",
        soname: "libcurand.so.10",
        owns: |s| s.starts_with("curand"),
    },
];

/// Where things are.
#[derive(Debug, Clone)]
pub struct Toolkit {
    pub release: &'static CudaRelease,
    /// `target/cuda-toolkit` (13.0) or `target/cuda-toolkit-12.8`.
    pub dir: PathBuf,
    /// The toolkit root (`CUDA_HOME`): `site/nvidia/cu13`, or `home` for a split one.
    pub home: PathBuf,
    /// The stub libraries (put on `LIBRARY_PATH` when linking).
    pub stubs: PathBuf,
    /// The cargo target directory of CUDA builds.
    pub target_dir: PathBuf,
    /// `CUDARC_CUDA_VERSION` for the build ([`cudarc_version_for_candle`]).
    pub cudarc_version: Option<&'static str>,
}

impl Toolkit {
    /// The toolkit of the workspace's own candle (CUDA 13.0, `target/cuda`), or of the
    /// given candle release (its toolkit; `target/cuda-VERSION`).
    pub fn new(candle: Option<&str>) -> Toolkit {
        let root = util::root();
        let release = candle.map_or(&CUDA_13_0, release_for_candle);
        let dir = match release.name {
            "13.0" => root.join("target/cuda-toolkit"),
            other => root.join(format!("target/cuda-toolkit-{other}")),
        };
        let target_dir = match candle {
            None => root.join("target/cuda"),
            Some(v) => root.join(format!("target/cuda-{v}")),
        };
        Toolkit {
            release,
            home: match release.parts {
                [one] => dir.join("site/nvidia").join(one),
                _ => dir.join("home"),
            },
            stubs: match candle {
                None => dir.join("stubs"),
                Some(_) => target_dir.join("link-stubs"),
            },
            target_dir,
            dir,
            cudarc_version: candle.and_then(cudarc_version_for_candle),
        }
    }

    fn marker(&self) -> PathBuf {
        self.dir.join("installed.txt")
    }

    pub fn nvcc(&self) -> PathBuf {
        self.home.join("bin/nvcc")
    }

    /// Installed with the pinned wheels (the marker lists them) and nvcc is there.
    pub fn is_installed(&self) -> bool {
        let wanted = self.release.wheels.join("\n");
        fs::read_to_string(self.marker()).is_ok_and(|m| m.trim() == wanted) && self.nvcc().exists()
    }

    /// Installs the wheels unless already there (or `force`), and the libcudart.so link.
    pub fn ensure_installed(&self, force: bool) -> Result<()> {
        if force || !self.is_installed() {
            let site = self.dir.join("site");
            if site.exists() {
                fs::remove_dir_all(&site)
                    .with_context(|| format!("cannot remove {}", site.display()))?;
            }
            fs::create_dir_all(&self.dir)?;
            run_cmd(
                Command::new("python3")
                    .args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
                    .arg(&site)
                    .args(self.release.wheels),
            )
            .context("pip could not install the CUDA wheels")?;
            if !self.nvcc().exists() && self.release.parts.len() == 1 {
                bail!(
                    "the wheels installed but {} is missing: did the wheels' layout change?",
                    self.nvcc().display()
                );
            }
            if self.release.parts.len() > 1 {
                self.merge_parts(&site)?;
            }
            fs::write(self.marker(), self.release.wheels.join("\n") + "\n")?;
        } else {
            eprintln!("CUDA toolkit already installed in {}", self.home.display());
        }
        let link = self.home.join("lib/libcudart.so");
        if fs::symlink_metadata(&link).is_err() {
            let real = format!("libcudart.so.{}", self.release.soname_major);
            std::os::unix::fs::symlink(real, &link)
                .with_context(|| format!("cannot create {}", link.display()))?;
        }
        Ok(())
    }

    /// Copies the components' folders into one toolkit root (nvcc finds its headers and
    /// nvvm relative to its own real path, so links would not do).
    fn merge_parts(&self, site: &Path) -> Result<()> {
        fs::create_dir_all(&self.home)?;
        for part in self.release.parts {
            let from = site.join("nvidia").join(part);
            let mut cp = Command::new("cp");
            cp.arg("-r")
                .arg(format!("{}/.", from.display()))
                .arg(&self.home);
            run_cmd(&mut cp).with_context(|| format!("cannot merge {}", from.display()))?;
        }
        if !self.nvcc().exists() {
            bail!(
                "the CUDA {} wheels installed but {} is missing: NVIDIA's CUDA 12 nvcc wheels \
                 (checked: nvidia-cuda-nvcc-cu12 12.8.93 and 12.9.86) carry ptxas only, no \
                 nvcc; install a CUDA {} toolkit and point CUDA_HOME at it, or build against \
                 candle >= 0.9.0 (CUDA 13.0 wheels)",
                self.release.name,
                self.nvcc().display(),
                self.release.name
            );
        }
        Ok(())
    }

    /// The environment of a CUDA build, as (name, value).
    pub fn env(&self) -> Vec<(String, String)> {
        let home = self.home.display().to_string();
        let path = std::env::var("PATH").unwrap_or_default();
        let library_path = match std::env::var("LIBRARY_PATH") {
            Ok(p) if !p.is_empty() => format!("{}:{p}", self.stubs.display()),
            _ => self.stubs.display().to_string(),
        };
        let mut env: Vec<(String, String)> = vec![
            ("CUDA_HOME".into(), home.clone()),
            ("CUDA_ROOT".into(), home.clone()),
            ("CUDA_PATH".into(), home.clone()),
            ("PATH".into(), format!("{home}/bin:{path}")),
            ("CUDA_COMPUTE_CAP".into(), COMPUTE_CAP.into()),
            // gcc, the linker driver rustc uses, adds LIBRARY_PATH to its -L list; unlike
            // RUSTFLAGS it does not change cargo's fingerprints, so no rebuild.
            ("LIBRARY_PATH".into(), library_path),
            (
                "CARGO_TARGET_DIR".into(),
                self.target_dir.display().to_string(),
            ),
        ];
        if let Some(v) = self.cudarc_version {
            env.push(("CUDARC_CUDA_VERSION".into(), v.into()));
        }
        env
    }

    fn extra_symbols_file(&self) -> PathBuf {
        self.stubs.join("extra-symbols.txt")
    }

    /// Adds symbols the linker reported undefined (kept across runs). Returns how many
    /// were new and belong to a stub library.
    pub fn add_extra_symbols(&self, symbols: &BTreeSet<String>) -> Result<usize> {
        fs::create_dir_all(&self.stubs)?;
        let mut known = read_lines(&self.extra_symbols_file());
        let before = known.len();
        known.extend(
            symbols
                .iter()
                .filter(|s| STUBS.iter().any(|stub| (stub.owns)(s)))
                .cloned(),
        );
        let text: String = known.iter().map(|s| format!("{s}\n")).collect();
        fs::write(self.extra_symbols_file(), text)?;
        Ok(known.len() - before)
    }

    /// Generates the stub libraries from the undefined symbols of every rlib in the CUDA
    /// target directory (plus those learned from link errors). Returns the symbol count
    /// per library.
    pub fn generate_stubs(&self) -> Result<BTreeMap<&'static str, usize>> {
        let deps = self.target_dir.join("release/deps");
        let mut rlibs: Vec<PathBuf> = fs::read_dir(&deps)
            .with_context(|| {
                format!(
                    "{} does not exist: build the CUDA libraries first",
                    deps.display()
                )
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "rlib"))
            .collect();
        rlibs.sort();
        let mut symbols = read_lines(&self.extra_symbols_file());
        for chunk in rlibs.chunks(64) {
            // nm complains about each rlib's metadata member (not an object); that is
            // expected, so its stderr and exit status are ignored and stdout is used.
            let out = Command::new("nm")
                .args(["-u", "--format=just-symbols"])
                .args(chunk)
                .stderr(std::process::Stdio::null())
                .output()
                .context("cannot run nm (binutils)")?;
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let s = line.trim();
                if !s.is_empty() && !s.ends_with(':') {
                    symbols.insert(s.to_string());
                }
            }
        }
        fs::create_dir_all(&self.stubs)?;
        let mut counts = BTreeMap::new();
        for stub in STUBS {
            let owned: Vec<&String> = symbols.iter().filter(|s| (stub.owns)(s)).collect();
            counts.insert(stub.link_name, owned.len());
            let mut c = format!(
                "/* Link-time stub of {}: generated by `cargo xtask cuda-toolkit` from the\n   undefined symbols of the CUDA rlibs. Never run: the real library is loaded\n   on the GPU host. */\n",
                stub.soname(self.release)
            );
            for s in &owned {
                c.push_str(&format!("void {s}(void) {{}}\n"));
            }
            let src = self.stubs.join(format!("{}.c", stub.link_name));
            let lib = self.stubs.join(format!("lib{}.so", stub.link_name));
            if fs::read_to_string(&src).is_ok_and(|old| old == c) && lib.exists() {
                continue;
            }
            fs::write(&src, &c)?;
            run_cmd(
                Command::new("gcc")
                    .args(["-shared", "-fPIC", "-o"])
                    .arg(&lib)
                    .arg(&src)
                    .arg(format!("-Wl,-soname,{}", stub.soname(self.release))),
            )
            .with_context(|| format!("cannot build the stub lib{}.so", stub.link_name))?;
        }
        Ok(counts)
    }
}

fn read_lines(path: &Path) -> BTreeSet<String> {
    fs::read_to_string(path)
        .map(|t| {
            t.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// Symbols named in `undefined reference to `sym'` linker errors.
pub fn undefined_references(linker_output: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for part in linker_output.split("undefined reference to `").skip(1) {
        if let Some(end) = part.find('\'') {
            out.insert(part[..end].to_string());
        }
    }
    out
}

pub fn run(args: &[String]) -> Result<()> {
    let mut force = false;
    let mut candle = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--force" => force = true,
            "--candle" => candle = Some(util::flag_value(a, &mut it)?),
            other => bail!("cuda-toolkit: unknown option `{other}`"),
        }
    }
    let tk = Toolkit::new(candle.as_deref());
    eprintln!("CUDA {} toolkit in {}", tk.release.name, tk.dir.display());
    tk.ensure_installed(force)?;
    if tk.target_dir.join("release/deps").is_dir() {
        let counts = tk.generate_stubs()?;
        eprintln!("link stubs in {}: {counts:?}", tk.stubs.display());
    } else {
        eprintln!(
            "no CUDA build yet in {}: `cargo xtask gpu-build` generates the link stubs",
            tk.target_dir.display()
        );
    }
    println!("# the environment of a CUDA build (eval \"$(cargo xtask cuda-toolkit)\"):");
    for (k, v) in tk.env() {
        println!("export {k}='{v}'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(sym: &str) -> Vec<&'static str> {
        STUBS
            .iter()
            .filter(|s| (s.owns)(sym))
            .map(|s| s.link_name)
            .collect()
    }

    #[test]
    fn each_symbol_goes_to_one_library() {
        assert_eq!(owner("cuMemPoolTrimTo"), ["cuda"]);
        assert_eq!(owner("cuInit"), ["cuda"]);
        assert_eq!(owner("cublasLtMatmul"), ["cublasLt"]);
        assert_eq!(owner("cublasCreate_v2"), ["cublas"]);
        assert_eq!(owner("curandCreateGenerator"), ["curand"]);
        assert_eq!(owner("nvrtcCompileProgram"), ["nvrtc"]);
        assert!(owner("cudaMalloc").is_empty());
        assert!(owner("memcpy").is_empty());
        assert!(owner("cu").is_empty());
    }

    #[test]
    fn each_candle_gets_a_toolkit_its_cudarc_knows() {
        assert_eq!(release_for_candle("0.8.4").name, "12.8");
        assert_eq!(release_for_candle("0.9.1").name, "13.0");
        assert_eq!(cudarc_version_for_candle("0.9.1"), Some("12090"));
        assert_eq!(cudarc_version_for_candle("0.9.0"), Some("12090"));
        assert_eq!(cudarc_version_for_candle("0.9.2"), None);
        assert_eq!(cudarc_version_for_candle("0.8.4"), None);
        assert_eq!(release_for_candle("0.9.2").name, "13.0");
        assert_eq!(release_for_candle("0.10.2").name, "13.0");
        assert_eq!(release_for_candle("0.11.1").name, "13.0");
        assert_eq!(STUBS[1].soname(&CUDA_12_8), "libnvrtc.so.12");
        assert_eq!(STUBS[1].soname(&CUDA_13_0), "libnvrtc.so.13");
        assert_eq!(STUBS[4].soname(&CUDA_13_0), "libcurand.so.10");
    }

    #[test]
    fn reads_undefined_references_from_linker_output() {
        let out = "/usr/bin/ld: foo.o: in function `x':\nfoo.rs:(.text+0x1): undefined reference to `cuMemPoolTrimTo'\n\
                   /usr/bin/ld: undefined reference to `cublasLtMatmul'\ncollect2: error";
        let got: Vec<String> = undefined_references(out).into_iter().collect();
        assert_eq!(got, ["cuMemPoolTrimTo", "cublasLtMatmul"]);
    }
}
