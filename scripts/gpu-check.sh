#!/bin/sh
# gpu-check.sh: the GPU work of a session in one device call.
#
#   scripts/gpu-check.sh build   here (no GPU needed): the GPU test binaries and jitllm, built static
#                                into .devbin/ (git-ignored), xz-compressed to travel (device tool: carry .devbin)
#   scripts/gpu-check.sh run     on the GPU host, from the repository root: every GPU test of runtime/cuda,
#                                runtime/gpuexec and runtime/sched, the transformers references of graphs and
#                                runtime/convert, then synth models and jitllm speed on one
#                                device and split over two stages; the log to $OUT/gpu-check.log (or stdout)
#
# GPU_CHECK_TESTS (a -test.run pattern, default GPU|Kernels|NoDriver) and GPU_CHECK_SPEED=0 (tests only)
# narrow a run; GPU_CHECK_MODELS lists the synth shapes timed (default: the three of docs/perf).
# GPU_CHECK_BINS narrows the build (default: cuda gpuexec sched graphs convert jitllm; a run skips what is
# missing): the device tool carries at most 64 MiB with the tree, which is near 58 MB, and all six
# compressed binaries take 11 MB, so a session that needs only gpuexec and jitllm builds those.
#
#   scripts/gpu-check.sh build-ab REV…   here: jitllm built from each git revision (a worktree each) into
#                                        .devbin/jitllm-<n>.xz, n its place in the list, the revisions
#                                        named in .devbin/ab-revs
#   scripts/gpu-check.sh ab              on the GPU host: each model of GPU_CHECK_MODELS timed by every
#                                        binary in turn, twice over (tg128, AB_ARGS to change), so the
#                                        revisions compare as ratios from one call; to $OUT/ab.log
#   scripts/gpu-check.sh knobs           on the GPU host (jitllm built): tg128 of each model of GPU_CHECK_MODELS
#                                        (default the 8B) under each setting of GPU_CHECK_KNOBS ("A=1;B=2 C=3",
#                                        "X=default" for none), interleaved twice, to $OUT/knobs.log
#   scripts/gpu-check.sh trace           the same settings' TestGPUStepTrace (gpuexec.test built): the step's
#                                        timeline CTA by CTA, to $OUT/trace-<model>-<n>.log
#   scripts/gpu-check.sh verify          on the GPU host (gpuexec.test built): the quick checks of what the knobs
#                                        still to time run (TestGPUMatchesCPU on the synth 1B Q4_K_M, its cases
#                                        the counted folds among them, again under each setting of
#                                        GPU_CHECK_VERIFY, default JITLLM_ATTN_WARPS=2; TestGPUAttentionBlock), to
#                                        $OUT/verify.log: run it before timing them
# Both builds end by saying whether the tree and .devbin fit the device tool's 64 MiB. Where they do not
# (each jitllm is 2.25 MB), carry some of the binaries, run ab, and carry the rest in the next call while
# the machine is warm: ab times every binary in /tmp/gpu-check-ab, the earlier call's ones included.
set -eu
cmd=${1:-}
bin=.devbin

# fits says how many bytes the device tool would carry (the tracked and untracked-not-ignored files, and
# .devbin) against its 64 MiB.
fits() {
	total=$({
		git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null
		find "$bin" -type f -exec stat -c %s {} +
	} | awk '{n += $1} END {print n + 0}')
	limit=$((64 << 20))
	if [ "$total" -gt "$limit" ]; then
		echo "gpu-check: the tree and $bin take $total bytes, over the device tool's $limit: carry part of $bin at a time" >&2
	else
		echo "gpu-check: the tree and $bin take $total bytes of the device tool's $limit"
	fi
}
# unpack decompresses the .xz binaries given into directory $1, executable.
unpack() {
	dir=$1
	shift
	mkdir -p "$dir"
	for f in "$@"; do
		[ -f "$f" ] || continue
		xz -dc "$f" >"$dir/$(basename "$f" .xz)"
		chmod +x "$dir/$(basename "$f" .xz)"
	done
}
case "$cmd" in
build)
	mkdir -p "$bin"
	rm -f "$bin"/*.xz
	for b in ${GPU_CHECK_BINS:-cuda gpuexec sched graphs convert jitllm}; do
		case "$b" in
		cuda | gpuexec | sched) CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$bin/$b.test" "./runtime/$b" ;;
		# the transformers references (python3 with torch there): the graphs and the HF converter
		graphs) CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$bin/graphs.test" ./graphs ;;
		convert) CGO_ENABLED=0 go test -c -ldflags="-s -w" -o "$bin/convert.test" ./runtime/convert ;;
		jitllm) CGO_ENABLED=0 go build -ldflags='-s -w' -o "$bin/jitllm" ./cmd/jitllm ;;
		*)
			echo "gpu-check: unknown binary $b" >&2
			exit 2
			;;
		esac
	done
	for f in "$bin"/*.test "$bin"/jitllm; do
		if [ -f "$f" ]; then xz -T0 -9 -f "$f"; fi
	done
	ls -l "$bin"
	fits
	;;
run)
	B=/tmp/gpu-check-bin
	unpack "$B" "$bin"/*.xz
	log=${OUT:+$OUT/gpu-check.log}
	log=${log:-/dev/stdout}
	root=$(pwd)
	tests=${GPU_CHECK_TESTS:-GPU|Kernels|NoDriver}
	{
		nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
		for p in cuda gpuexec sched; do
			[ -x "$B/$p.test" ] || continue
			echo "== runtime/$p"
			(cd "$root/runtime/$p" && "$B/$p.test" -test.v -test.timeout 480s -test.run "$tests" 2>&1 |
				grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go' || true)
		done
		for d in graphs runtime/convert; do
			[ -x "$B/$(basename "$d").test" ] || continue
			echo "== $d against transformers"
			(cd "$root/$d" && "$B/$(basename "$d").test" -test.v -test.timeout 300s -test.run 'Transformers' 2>&1 |
				grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go' || true)
		done
		# the prefill products on wgmma (sm_90a), not yet the default: the whole runner with them
		for w in 1 2; do
			[ -x "$B/gpuexec.test" ] || break
			echo "== runtime/gpuexec with JITLLM_WGMMA=$w"
			(cd "$root/runtime/gpuexec" && JITLLM_WGMMA=$w "$B/gpuexec.test" -test.v -test.timeout 300s \
				-test.run 'TestGPUMatchesCPU|TestGPUMatchesInterpretedPlan' 2>&1 |
				grep -E '^(--- |PASS|FAIL|ok|panic)|_test.go' || true)
		done
		if [ "${GPU_CHECK_SPEED:-1}" != 0 ] && [ -x "$B/jitllm" ]; then
			export XDG_CACHE_HOME=/tmp/gpu-check-cache
			for spec in ${GPU_CHECK_MODELS:-llama-3.2-1b:q4_k_m qwen3-0.6b:q8_0 llama-3.1-8b:q4_k_m}; do
				like=${spec%%:*} typ=${spec##*:}
				f=/tmp/$like-$typ.gguf
				[ -f "$f" ] || "$B/jitllm" synth --like "$like" --type "$typ" -o "$f" >/dev/null
				echo "== speed $like $typ"
				"$B/jitllm" speed "$f" -p 512 -n 128 -r 2 -devices cuda 2>&1 | grep -E '^\||load|error|reads' || true
				echo "-- JITLLM_Q6KA=0 (Q6_K matrices in their stored layout)"
				JITLLM_Q6KA=0 "$B/jitllm" speed "$f" -p 0 -n 128 -r 2 -devices cuda 2>&1 | grep -E 'tg128|error|reads' || true
				echo "-- the defaults' parts (docs/gpu.md): neither staged nor stacked, not stacked, not staged, every mat-vec staged, copying ahead in resident grids, the default again"
				for v in "JITLLM_STAGE=0 JITLLM_ROPE_STACK=0" "JITLLM_ROPE_STACK=0" "JITLLM_STAGE=0" "JITLLM_STAGE_ROWS=0" \
					"JITLLM_STAGE_AHEAD=1 JITLLM_STAGE_GRID=1" "X=default"; do
					echo "   $v"
					env $v "$B/jitllm" speed "$f" -p 0 -n 128 -r 2 -devices cuda 2>&1 | grep -E 'tg128 |error' || true
				done
				echo "-- phased steps, staged and copying ahead (JITLLM_PHASES=all; =2), by grid barrier: count, count without fences"
				for b in count bare; do
					JITLLM_STAGE_AHEAD=1 JITLLM_PHASES=all JITLLM_PHASES_BARRIER=$b "$B/jitllm" speed "$f" -p 0 -n 128 -r 2 -devices cuda 2>&1 | grep -E 'tg128 |error' || true
				done
				JITLLM_PHASES=2 JITLLM_PHASES_BARRIER=count "$B/jitllm" speed "$f" -p 0 -n 128 -r 2 -devices cuda 2>&1 | grep -E 'tg128 |error' || true
				echo "-- decode at depth 4096: the long step (AttentionBlockSplit), then without it"
				"$B/jitllm" speed "$f" -p 0 -n 64 -d 4096 -r 1 -devices cuda 2>&1 | grep -E 'tg64|error' || true
				JITLLM_ATTN_SPLIT_FROM=1000000 "$B/jitllm" speed "$f" -p 0 -n 64 -d 4096 -r 1 -devices cuda 2>&1 | grep -E 'tg64|error' || true
				echo "-- decode at depth 12288: the 32-piece tier from 8192, then 16 pieces throughout"
				"$B/jitllm" speed "$f" -p 0 -n 64 -d 12288 -r 1 -devices cuda 2>&1 | grep -E 'tg64|error' || true
				JITLLM_ATTN_CHUNKS=16 "$B/jitllm" speed "$f" -p 0 -n 64 -d 12288 -r 1 -devices cuda 2>&1 | grep -E 'tg64|error' || true
				for w in 1 2; do
					echo "-- JITLLM_WGMMA=$w"
					JITLLM_WGMMA=$w "$B/jitllm" speed "$f" -p 512 -n 0 -r 2 -devices cuda 2>&1 | grep -E 'pp512|error' || true
				done
				"$B/jitllm" speed "$f" -p 2048 -n 32 -r 1 -devices cuda:0,cuda:0 2>&1 | grep -E '^\||split|error' || true
			done
		fi
	} >"$log" 2>&1
	;;
build-ab)
	shift
	[ $# -ge 2 ] || {
		echo "gpu-check: build-ab takes two revisions or more" >&2
		exit 2
	}
	mkdir -p "$bin"
	rm -f "$bin"/jitllm-*.xz "$bin"/ab-revs
	n=0
	for rev in "$@"; do
		n=$((n + 1))
		wt=$(mktemp -d)
		git worktree add --detach "$wt" "$rev" >/dev/null
		# the worktree goes whether the build succeeds or not
		built=0
		(cd "$wt" && CGO_ENABLED=0 go build -ldflags='-s -w' -o "$OLDPWD/$bin/jitllm-$n" ./cmd/jitllm) || built=$?
		git worktree remove --force "$wt"
		[ "$built" = 0 ] || exit "$built"
		xz -T0 -9 -f "$bin/jitllm-$n"
		echo "$n $rev $(git rev-parse --short "$rev")" >>"$bin/ab-revs"
	done
	cat "$bin/ab-revs"
	fits
	;;
ab)
	B=/tmp/gpu-check-ab
	unpack "$B" "$bin"/jitllm-*.xz
	log=${OUT:+$OUT/ab.log}
	log=${log:-/dev/stdout}
	export XDG_CACHE_HOME=/tmp/gpu-check-cache
	{
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
		cat "$bin/ab-revs"
	} >>"$log" 2>&1
	for spec in ${GPU_CHECK_MODELS:-llama-3.1-8b:q4_k_m llama-3.2-1b:q4_k_m qwen3-0.6b:q8_0}; do
		like=${spec%%:*} typ=${spec##*:}
		f=/tmp/$like-$typ.gguf
		[ -f "$f" ] || "$B/jitllm-1" synth --like "$like" --type "$typ" -o "$f" >/dev/null
		for round in 1 2; do
			for b in "$B"/jitllm-*; do
				echo "== $like $typ round $round $(basename "$b") $(date -u +%H:%M:%S)" >>"$log"
				# shellcheck disable=SC2086 # AB_ARGS is a list of flags
				"$b" speed "$f" ${AB_ARGS:--p 0 -n 128 -r 2} -devices cuda 2>&1 | grep -E 'tg|pp|error|reads|^jitllm:' >>"$log" || true
			done
		done
	done
	;;
knobs | trace)
	# one build under several settings of the run-time knobs (GPU_CHECK_KNOBS: settings separated by ";",
	# each a list of VAR=value, "X=default" for none): knobs times tg128 of each model under each setting,
	# interleaved twice, into $OUT/knobs.log; trace logs TestGPUStepTrace (JITLLM_TRACE=1) of each model
	# under each setting into $OUT/trace-<model>-<n>.log, their totals into $OUT/knobs.log
	B=/tmp/gpu-check-bin
	unpack "$B" "$bin"/jitllm.xz "$bin"/gpuexec.test.xz
	log=${OUT:+$OUT/knobs.log}
	log=${log:-/dev/stdout}
	export XDG_CACHE_HOME=/tmp/gpu-check-cache
	knobs=${GPU_CHECK_KNOBS:-X=default;JITLLM_NORM_FOLD=count JITLLM_SWIGLU_Q8_0=count;JITLLM_MATVEC_CTAS=8:AddQ6_KA;JITLLM_ATTN_WARPS=2;JITLLM_NORM_FOLD=count;JITLLM_SWIGLU_Q8_0=count;JITLLM_Q4K_WIDE=2,128}
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$log" 2>&1 || true
	root=$(pwd)
	for spec in ${GPU_CHECK_MODELS:-llama-3.1-8b:q4_k_m}; do
		like=${spec%%:*} typ=${spec##*:}
		f=/tmp/$like-$typ.gguf
		[ -f "$f" ] || "$B/jitllm" synth --like "$like" --type "$typ" -o "$f" >/dev/null
		rounds="1 2"
		[ "$cmd" = trace ] && rounds=1
		for round in $rounds; do
			n=0
			old=$IFS
			IFS=';'
			for v in $knobs; do
				IFS=$old
				n=$((n + 1))
				echo "== $like $typ round $round: $v $(date -u +%H:%M:%S)" >>"$log"
				if [ "$cmd" = knobs ]; then
					# shellcheck disable=SC2086 # v is a list of VAR=value
					env $v "$B/jitllm" speed "$f" ${AB_ARGS:--p 0 -n 128 -r 2} -devices cuda 2>&1 | grep -E 'tg|pp|error|^jitllm:' >>"$log" || true
				else
					out=${OUT:-/tmp}/trace-$like-$n.log
					# shellcheck disable=SC2086
					(cd "$root/runtime/gpuexec" && env $v JITLLM_TRACE=1 GPUEXEC_PROFILE_MODEL="$f" \
						"$B/gpuexec.test" -test.v -test.timeout 200s -test.run 'TestGPUStepTrace$' >"$out" 2>&1) || true
					grep -E 'traced step|the step:|^--- |FAIL|panic' "$out" >>"$log" || true
				fi
				IFS=';'
			done
			IFS=$old
		done
	done
	;;
verify)
	B=/tmp/gpu-check-bin
	unpack "$B" "$bin"/gpuexec.test.xz
	log=${OUT:+$OUT/verify.log}
	log=${log:-/dev/stdout}
	keep='^(\s*--- |PASS|FAIL|ok|panic)|_test.go'
	{
		nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
		cd runtime/gpuexec
		old=$IFS
		IFS=';'
		for v in X=default ${GPU_CHECK_VERIFY:-JITLLM_ATTN_WARPS=2}; do
			IFS=$old
			echo "== TestGPUMatchesCPU synth 1B Q4_K_M: $v $(date -u +%H:%M:%S)"
			# shellcheck disable=SC2086 # v is a list of VAR=value
			env $v timeout 120 "$B/gpuexec.test" -test.v -test.run 'TestGPUMatchesCPU/synth:llama-3.2-1b/Q4_K_M$' 2>&1 | grep -E "$keep" | tail -30 || true
			IFS=';'
		done
		IFS=$old
		echo "== TestGPUAttentionBlock $(date -u +%H:%M:%S)"
		timeout 150 "$B/gpuexec.test" -test.v -test.run 'TestGPUAttentionBlock$' 2>&1 | grep -E "$keep" | grep -vE 'AttentionSplit\+Merge' | tail -60 || true
	} >>"$log" 2>&1
	;;
*)
	echo "usage: scripts/gpu-check.sh build|run|build-ab REV…|ab|knobs|trace|verify" >&2
	exit 2
	;;
esac
