# TEMPORARY helper test script (removed after the GPU check).
import os, sys, glob, time, importlib.util, subprocess, torch
os.environ.setdefault('TORCH_EXTENSIONS_DIR', '/tmp/torch_ext_l1')
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

if len(sys.argv) > 2 and sys.argv[1] == 'build':
    t = time.time(); load(sys.argv[2], 'cand'); print('built', sys.argv[2], '%.0fs' % (time.time() - t), flush=True); sys.exit(0)

def timeit(fn, ins, iters=10):
    for _ in range(2): fn(*ins)
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(*ins); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts) // 2]

def gen_inputs(m, seed):
    torch.manual_seed(seed)
    with torch.device('cuda'):
        return m.get_inputs()

cands = sorted(c for c in glob.glob('solutions/level1/0*/cuda_*.py') if int(c.split('/')[2][:3]) <= 28)
mode = sys.argv[1] if len(sys.argv) > 1 else 'all'
procs = []
if mode in ('all', 'cands'):
    env = dict(os.environ, MAX_JOBS='4')
    for c in cands:
        procs.append(subprocess.Popen([sys.executable, __file__, 'build', c], env=env))

if mode in ('all', 'eager'):
    for p in sorted(q for q in glob.glob('problems/level1/0*.py') if int(os.path.basename(q)[:3]) <= 28):
        m = load(p, 'prob')
        atol, rtol = getattr(m, 'ATOL', 1e-4), getattr(m, 'RTOL', 1e-4)
        torch.manual_seed(0); model = m.Model(*m.get_init_inputs()).cuda()
        ins = gen_inputs(m, 1)
        with torch.no_grad():
            ref = model(*ins)
            ms = timeit(model, ins)
            fin = bool(torch.isfinite(ref).all())
            tol = atol + rtol * ref.abs()
            zeros_fail = float((ref.abs() > tol).float().mean())
            model64 = model.double(); ins64 = [t.double() for t in ins]
            r64 = model64(*ins64)
            ratio = float(((ref.double() - r64).abs() / (atol + rtol * r64.abs())).max())
        print(f'{os.path.basename(p):40s} eager {ms:7.3f} ms  finite={fin} mean|ref|={float(ref.abs().mean()):.3g} '
              f'zeros_fail_frac={zeros_fail:.3f} ref32_vs_fp64_err/tol={ratio:.3f}', flush=True)
        del model, model64, ins, ins64, ref, r64, tol; torch.cuda.empty_cache()

for pr in procs: pr.wait()
if mode in ('all', 'cands'):
    for c in cands:
        stem = os.path.basename(os.path.dirname(c))
        m = load(f'problems/level1/{stem}.py', 'prob')
        atol, rtol = getattr(m, 'ATOL', 1e-4), getattr(m, 'RTOL', 1e-4)
        try:
            cm = load(c, 'cand')
        except Exception as e:
            print('LOAD FAIL', c, repr(e)[:2000], flush=True); continue
        ok = True; worst = 0.0; t_ref = t_new = float('nan')
        for seed in range(3):
            torch.manual_seed(seed); ref_model = m.Model(*m.get_init_inputs()).cuda()
            torch.manual_seed(seed); new_model = cm.ModelNew(*m.get_init_inputs()).cuda()
            new_model.load_state_dict(ref_model.state_dict())
            ins = gen_inputs(m, 100 + seed)
            with torch.no_grad():
                ref = ref_model(*ins); out = new_model(*ins)
                torch.cuda.synchronize()
                if out.shape != ref.shape:
                    print('SHAPE MISMATCH', c, out.shape, ref.shape); ok = False; break
                excess = ((out - ref).abs() / (atol + rtol * ref.abs()))
                r = float(excess.max()); worst = max(worst, r)
                if not (r <= 1.0) or not bool(torch.isfinite(out).all()): ok = False
            if seed == 2:
                with torch.no_grad():
                    t_ref = timeit(ref_model, ins); t_new = timeit(new_model, ins)
            del ref, out, excess
        del ins, ref_model, new_model; torch.cuda.empty_cache()
        print(f'{stem:32s} {os.path.basename(c):34s} correct={ok} max_err/tol={worst:.4f} '
              f'eager={t_ref:.3f}ms cand={t_new:.3f}ms speedup={t_ref / t_new:.3f}x', flush=True)
