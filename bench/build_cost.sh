#!/usr/bin/env bash
# What the typed read-back of result documents costs the release build (issue 23's "build time and binary size
# no more than 5% worse"): `roundtrip report` reads every document kind into its library type
# (`Loaded::typed`, serde's Deserialize), where before one house it read hand-copied `*In` structs the same way.
# For each of two commits the script builds the tree as it is and the tree with `Loaded::typed` stubbed out (it
# returns an error without deserializing, so no Deserialize impl is instantiated), rebuilds the crate in
# interleaved rounds (`touch src/lib.rs src/main.rs && cargo build --release`, dependencies already built) and
# prints the user CPU and wall time (medians) and the binary's text size of each: the typed read's cost in each
# commit is its tree minus its stub, and the difference between the two commits is what the change of documents
# cost, apart from the feature work between them.
#
# Usage: bench/build_cost.sh [ROUNDS=3] [BEFORE=253e4bc] [AFTER=HEAD]   (git, cargo, size, /usr/bin/time; the
# first builds of the four trees take several minutes each; trees and targets under a temporary directory)
set -euo pipefail
ROUNDS=${1:-3}; BEFORE=${2:-253e4bc}; AFTER=${3:-HEAD}
cd "$(dirname "$0")/.."
REPO=$PWD
WORK=$(mktemp -d /tmp/rt-build-cost.XXXXXX)
cleanup() {
    for t in "$WORK"/*/; do git -C "$REPO" worktree remove --force "$t" 2>/dev/null || true; done
    [ -n "${KEEP:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

trees=()
for c in "$BEFORE" "$AFTER"; do
    id=$(git rev-parse --short "$c")
    for kind in typed stub; do
        t=$WORK/$id-$kind
        git worktree add -q --detach "$t" "$c"
        if [ $kind = stub ]; then
            python3 - "$t/src/report/load.rs" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
start = s.index("T::deserialize(&self.value).map_err(")
end = s.index("})", start) + 2
s = s[:start] + ("{ let _ = std::marker::PhantomData::<T>; Err(LoadError::Incomplete { path: self.path.clone(), "
                 "kind: self.kind.clone(), what: String::new() }) }") + s[end:]
open(p, "w").write(s)
EOF
        fi
        # Start from this checkout's built dependencies when there are some (the same crates).
        [ -d "$REPO/target/release" ] && mkdir -p "$t/target" && cp -a "$REPO/target/release" "$t/target/"
        trees+=("$t")
    done
done
for t in "${trees[@]}"; do
    echo "building $(basename "$t") (first build)" >&2
    (cd "$t" && cargo build --release -q)
done
for r in $(seq "$ROUNDS"); do
    for t in "${trees[@]}"; do
        cd "$t"
        touch src/lib.rs src/main.rs
        /usr/bin/time -f "%U %e" -o "$WORK/time" cargo build --release -q
        echo "$(basename "$t") $(cat "$WORK/time") $(size target/release/roundtrip | awk 'NR==2 {print $1}')" >>"$WORK/results"
        echo "round $r: $(tail -1 "$WORK/results")" >&2
    done
done
cd "$REPO"
echo
echo "release build of the crate (dependencies built), $ROUNDS interleaved rounds, medians; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-20s %10s %10s %12s\n" tree "user s" "wall s" "text bytes"
for t in "${trees[@]}"; do
    n=$(basename "$t")
    u=$(awk -v n="$n" '$1 == n {print $2}' "$WORK/results" | median)
    w=$(awk -v n="$n" '$1 == n {print $3}' "$WORK/results" | median)
    x=$(awk -v n="$n" '$1 == n {print $4}' "$WORK/results" | tail -1)
    printf "%-20s %10s %10s %12s\n" "$n" "$u" "$w" "$x"
    echo "$n $u $w $x" >>"$WORK/table"
done
python3 - "$WORK/table" <<'EOF'
import sys
rows = {l.split()[0]: [float(x) for x in l.split()[1:]] for l in open(sys.argv[1])}
names = list(rows)
b_t, b_s, a_t, a_s = (rows[n] for n in names)
print()
for label, t, s in (("before", b_t, b_s), ("after", a_t, a_s)):
    print(f"typed read {label}: user +{100 * (t[0] / s[0] - 1):.1f}%, text +{t[2] - s[2]:,.0f} B")
print(f"the documents' change (after minus before, in shares of the before tree): user "
      f"{100 * ((a_t[0] - a_s[0]) - (b_t[0] - b_s[0])) / b_t[0]:+.1f}%, text "
      f"{100 * ((a_t[2] - a_s[2]) - (b_t[2] - b_s[2])) / b_t[2]:+.1f}%")
print(f"everything between the commits: user {100 * (a_t[0] / b_t[0] - 1):+.1f}%, text {100 * (a_t[2] / b_t[2] - 1):+.1f}%")
EOF
