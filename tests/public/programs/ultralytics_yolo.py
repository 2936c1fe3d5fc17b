"""Ultralytics YOLO, unchanged: `YOLO("yolov8n.yaml")` (the model built from its YAML, no weights) trained
by `model.train(...)` on a dataset written in its own format (images/ and labels/ folders of synthetic
images with one box each, and a data YAML), `batch=-1` for its AutoBatch, its own OOM reduction (the first
epoch halves the batch on an OOM and rebuilds the loader, up to 3 times), last.pt written every epoch and
`resume=True` from it. amp, plots and validation are off (they would fetch weights or fonts); nbs=batch so
that each iteration is one optimizer step."""
import argparse
import os


def write_dataset(root, n, size):
    import numpy as np
    from PIL import Image
    if os.path.exists(os.path.join(root, "data.yaml")):
        return os.path.join(root, "data.yaml")
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        os.makedirs(os.path.join(root, "images", split), exist_ok=True)
        os.makedirs(os.path.join(root, "labels", split), exist_ok=True)
        for i in range(n if split == "train" else 4):
            img = (rng.random((size, size, 3)) * 255).astype("uint8")
            Image.fromarray(img).save(os.path.join(root, "images", split, "%04d.png" % i))
            cx, cy, w, h = rng.uniform(0.3, 0.7, 2).tolist() + rng.uniform(0.1, 0.3, 2).tolist()
            with open(os.path.join(root, "labels", split, "%04d.txt" % i), "w") as f:
                f.write("%d %.4f %.4f %.4f %.4f\n" % (i % 2, cx, cy, w, h))
    with open(os.path.join(root, "data.yaml"), "w") as f:
        f.write("path: %s\ntrain: images/train\nval: images/val\nnames:\n  0: a\n  1: b\n" % root)
    return os.path.join(root, "data.yaml")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--project", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--imgsz", type=int, default=64)
    ap.add_argument("--images", type=int, default=32)
    a = ap.parse_args()
    os.environ.setdefault("YOLO_OFFLINE", "true")
    from ultralytics import YOLO, settings
    settings.update({"sync": False})
    data = write_dataset(os.path.join(a.project, "dataset"), a.images, a.imgsz)
    last = os.path.join(a.project, "run", "weights", "last.pt")
    if os.path.exists(last):
        print("resuming from", last, flush=True)
        YOLO(last).train(resume=True)
        return
    nbs = a.batch if a.batch > 0 else 64
    YOLO("yolov8n.yaml").train(data=data, epochs=a.epochs, imgsz=a.imgsz, batch=a.batch, nbs=nbs, workers=0,
                               amp=False, plots=False, val=False, project=a.project, name="run", exist_ok=True,
                               seed=0, deterministic=True, device=0, warmup_epochs=0, mosaic=0.0, verbose=True)


if __name__ == "__main__":
    main()
