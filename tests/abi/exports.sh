#!/usr/bin/env bash
# The exported dynamic symbols of one shared library equal the functions its
# public headers declare with TE_API, each under the version node of its
# header (docs/abi.md, "Exported symbols"):
#
#   exports.sh LIBRARY NODE <name> <header>... [NODE <name> <header>...]
#
# Reads the library with readelf (.dynsym, defined symbols) and the headers
# with sed, independently of the generator of the version script
# (cmake/te_symbols.cmake). Fails naming every symbol exported without
# being declared, declared without being exported, or under another node.
set -euo pipefail
READELF=${READELF:-readelf}
lib=$1; shift
[ -f "$lib" ] || { echo "exports.sh: no library $lib"; exit 1; }

declared=$(mktemp); exported=$(mktemp)
trap 'rm -f "$declared" "$exported"' EXIT
node= nodes=
while [ $# -gt 0 ]; do
  if [ "$1" = NODE ]; then node=$2; nodes="$nodes $2"; shift 2; continue; fi
  [ -n "$node" ] || { echo "exports.sh: a header before the first NODE"; exit 2; }
  names=$(sed -n 's/^TE_API[^(]*[^A-Za-z0-9_(]\([A-Za-z_][A-Za-z0-9_]*\)[ \t]*(.*/\1/p' "$1")
  [ -n "$names" ] || { echo "exports.sh: $1 declares nothing with TE_API"; exit 1; }
  printf '%s\n' $names | sed "s/\$/@@$node/" >> "$declared"
  shift
done
sort -o "$declared" "$declared"

# Defined dynamic symbols: "name@@NODE" (default version). The version
# nodes themselves appear as ABS symbols named after the node: skipped.
"$READELF" -W --dyn-syms "$lib" | awk -v nodes="$nodes" '
  BEGIN { n = split(nodes, a, " "); for (i = 1; i <= n; i++) isnode[a[i]] = 1 }
  $1 ~ /^[0-9]+:$/ && $7 != "UND" && NF >= 8 {
    name = $8
    if ($7 == "ABS" && (name in isnode)) next
    if ($4 != "FUNC") printf "NOTFUNC %s %s\n", $4, name
    else print name
  }' | sort -u > "$exported"

lib_name=$(basename "$lib")
fail=0
while read -r line; do
  echo "$lib_name: exports a non-function symbol: ${line#NOTFUNC }"; fail=1
done < <(grep '^NOTFUNC ' "$exported" || true)
sed -i '/^NOTFUNC /d' "$exported"
while read -r s; do
  base=${s%%@*}
  if grep -q "^${base}@" "$exported"; then
    echo "$lib_name: $base exported as $(grep "^${base}@" "$exported" | head -1), declared in node ${s#*@@}"
  else
    echo "$lib_name: declared with TE_API but not exported: $s"
  fi
  fail=1
done < <(comm -23 "$declared" "$exported")
while read -r s; do
  base=${s%%@*}
  grep -q "^${base}@@" "$declared" ||
    { echo "$lib_name: exported but not declared in its headers: $s"; fail=1; }
done < <(comm -13 "$declared" "$exported")
if [ $fail -ne 0 ]; then
  echo "$lib_name: FAIL (exported set != TE_API declarations)"
  exit 1
fi
echo "$lib_name: OK: $(wc -l < "$declared") functions, nodes:$nodes"
