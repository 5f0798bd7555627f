'use strict'

const fs = require('fs')
const path = require('path')

function secret (name) {
  const base = process.env.secret_mount_path || '/var/openfaas/secrets/'
  try {
    return fs.readFileSync(path.join(base, name), 'utf8').trim()
  } catch (err) {
    return 'unreadable: ' + err.message
  }
}

module.exports = async (req) => {
  const wait = Number(req.query.sleep || 0)
  if (wait > 0) await new Promise(resolve => setTimeout(resolve, wait * 1000))
  console.error(`nodefn handled ${req.method} ${req.path}`)
  const q = req.originalUrl.indexOf('?')
  return {
    status: 200,
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      lang: 'node',
      method: req.method,
      path: req.path,
      query: q < 0 ? '' : req.originalUrl.slice(q + 1),
      body: typeof req.body === 'string' ? req.body : '',
      sm: process.env.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE || '',
      secret: secret('api-key'),
      pid: process.pid
    })
  }
}
