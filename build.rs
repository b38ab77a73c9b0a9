// `sqlx::migrate!` embeds `migrations/` at compile time: a new or changed migration must rebuild
// the crate even when no Rust file changed (as `sqlx migrate build-script` writes it).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
