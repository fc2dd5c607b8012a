//! Next-touch per page against one synchronous move_pages of the same pages.
//!
//! `cargo run --release -p numalab-nexttouch --example nt_bench [PAGES] [ROUNDS]`
//! (in the multi-node VM: build it statically and run it there; it pins itself).

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("PAGES and ROUNDS are numbers"));
    let pages = args.next().unwrap_or(4096);
    let rounds = args.next().unwrap_or(5);
    print!("{}", numalab_nexttouch::bench::run(pages, rounds).render());
}
