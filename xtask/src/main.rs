fn main() {
    let ws = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let b = ptx_builder::PtxBuild::for_workspace(&ws, &ws.join("target"), "sm_90");
    match b.build() { Ok(p) => println!("{}", p.display()), Err(e) => { eprintln!("{e}"); std::process::exit(1) } }
}
